#include "k8s/json_scan.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

namespace tandem::k8s {
namespace {

// Keys longer than this are shortened in a reported path.
constexpr size_t kMaxKeyInPath = 40;

// One open array or object, and where the scan is inside it.
struct Level {
  bool object = false;
  bool expect_key = false;  ///< object: the next string is a key
  std::string key;          ///< object: the key last read
  size_t index = 0;         ///< array: the element being read
};

bool IsNumberChar(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

// True when the number token (digits, sign, '.', exponent only, so strtod
// cannot read "inf" or hexadecimal into it) has a magnitude beyond a
// double's: what nlohmann::json refuses with out_of_range 406.
bool Overflows(std::string_view token) {
  const std::string copy(token);
  const double value = std::strtod(copy.c_str(), nullptr);
  return !std::isfinite(value);
}

// Walks the text once, keeping a stack of the open arrays and objects. The
// stack grows by one Level per bracket that is still open, so it is bounded
// by `max_depth` when the caller gives one.
class Walker {
 public:
  explicit Walker(std::string_view text) : text_(text) {}

  // Walks text_[0, end) and returns the first finding (kind kNone when none).
  JsonScanFinding Walk(size_t end, size_t max_depth) {
    size_t i = 0;
    end = std::min(end, text_.size());
    while (i < end) {
      const char c = text_[i];
      if (c == '"') {
        i = ReadString(i);
      } else if (c == '{' || c == '[') {
        if (levels_.size() >= max_depth) return Finding(JsonScanFinding::Kind::kTooDeep, i, {});
        Level level;
        level.object = c == '{';
        level.expect_key = level.object;
        levels_.push_back(std::move(level));
        ++i;
      } else if (c == '}' || c == ']') {
        if (!levels_.empty()) levels_.pop_back();
        ++i;
      } else if (c == ',') {
        if (!levels_.empty()) {
          if (levels_.back().object) {
            levels_.back().expect_key = true;
          } else {
            ++levels_.back().index;
          }
        }
        ++i;
      } else if (c == ':') {
        if (!levels_.empty()) levels_.back().expect_key = false;
        ++i;
      } else if (c == '-' || (c >= '0' && c <= '9')) {
        size_t j = i;
        while (j < text_.size() && IsNumberChar(text_[j])) ++j;
        const std::string_view token = text_.substr(i, j - i);
        if (Overflows(token)) return Finding(JsonScanFinding::Kind::kNumberOverflow, i, token);
        i = j;
      } else {
        ++i;
      }
    }
    return {};
  }

  // The path of the value at the scan's position, e.g. "env.A[0][1]".
  std::string Path() const {
    std::string path;
    for (size_t k = 0; k < levels_.size(); ++k) {
      if (k == kMaxPathParts) return path + "...";
      const Level& level = levels_[k];
      if (!level.object) {
        path += "[" + std::to_string(level.index) + "]";
        continue;
      }
      if (!path.empty()) path += ".";
      if (level.key.size() > kMaxKeyInPath) {
        path += level.key.substr(0, kMaxKeyInPath) + "...";
      } else {
        path += level.key;
      }
    }
    return path;
  }

 private:
  // Skips the string that opens at `open` (its escapes included) and records
  // it as the key when an object expects one. Returns the offset after it.
  size_t ReadString(size_t open) {
    size_t i = open + 1;
    while (i < text_.size() && text_[i] != '"') i += text_[i] == '\\' ? 2 : 1;
    i = std::min(i, text_.size());
    if (!levels_.empty() && levels_.back().object && levels_.back().expect_key) {
      levels_.back().key = std::string(text_.substr(open + 1, i - open - 1));
    }
    return i + 1;
  }

  JsonScanFinding Finding(JsonScanFinding::Kind kind, size_t offset, std::string_view token) {
    JsonScanFinding f;
    f.kind = kind;
    f.byte = offset + 1;
    f.line = 1 + static_cast<size_t>(std::count(text_.begin(), text_.begin() + offset, '\n'));
    const size_t line_start = text_.rfind('\n', offset == 0 ? 0 : offset - 1);
    f.column =
        line_start == std::string_view::npos || offset == 0 ? offset + 1 : offset - line_start;
    f.path = Path();
    f.token = token.size() > kMaxTokenShown ? std::string(token.substr(0, kMaxTokenShown)) + "..."
                                            : std::string(token);
    return f;
  }

  std::string_view text_;
  std::vector<Level> levels_;
};

}  // namespace

JsonScanFinding ScanJsonText(std::string_view text, size_t max_depth) {
  return Walker(text).Walk(text.size(), max_depth);
}

std::string JsonPathAt(std::string_view text, size_t byte) {
  Walker walker(text);
  walker.Walk(byte == 0 ? 0 : byte - 1, std::numeric_limits<size_t>::max());
  return walker.Path();
}

}  // namespace tandem::k8s
