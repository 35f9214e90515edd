// Slurm's compressed host and task lists, as srun puts them into
// SLURM_STEP_NODELIST and SLURM_STEP_TASKS_PER_NODE.
//
// A hostlist is a comma-separated list of items; an item is text with any
// number of bracket groups, each a comma-separated list of numbers and
// ranges ("01-04"). A range keeps the zero padding of its first bound. Items
// with several groups expand to the product, leftmost group slowest:
// "r[1-2]n[1-2]" is r1n1, r1n2, r2n1, r2n2.
#include <fmt/format.h>

#include <charconv>

#include "cluster/launch_contract.h"
#include "tandem/error.h"

namespace tandem::cluster {
namespace {

constexpr size_t kMaxHosts = 1000000;

[[noreturn]] void Malformed(const std::string& list, const std::string& why) {
  throw ConfigError(fmt::format("Slurm hostlist '{}' is malformed: {}", list, why));
}

uint64_t ParseNumber(const std::string& list, const std::string& text) {
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    Malformed(list, fmt::format("'{}' is not a number", text));
  }
  return value;
}

// The expansions of one bracket group's body ("01-04,07").
std::vector<std::string> ExpandGroup(const std::string& list, const std::string& body) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    std::string part =
        body.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t dash = part.find('-');
    std::string lo_text = part.substr(0, dash);
    std::string hi_text = dash == std::string::npos ? lo_text : part.substr(dash + 1);
    uint64_t lo = ParseNumber(list, lo_text);
    uint64_t hi = ParseNumber(list, hi_text);
    if (hi < lo) Malformed(list, fmt::format("range '{}' runs backwards", part));
    if (hi - lo >= kMaxHosts || out.size() + (hi - lo + 1) > kMaxHosts) {
      Malformed(list, fmt::format("more than {} hosts", kMaxHosts));
    }
    for (uint64_t v = lo; v <= hi; ++v) {
      out.push_back(fmt::format("{:0{}}", v, lo_text.size()));
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

void ExpandItem(const std::string& list, const std::string& item, std::vector<std::string>& out) {
  std::vector<std::string> partial{""};
  size_t pos = 0;
  while (pos < item.size()) {
    size_t open = item.find('[', pos);
    std::string text = item.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    if (text.find(']') != std::string::npos) Malformed(list, "']' without '['");
    for (auto& p : partial) p += text;
    if (open == std::string::npos) break;
    size_t close = item.find(']', open);
    if (close == std::string::npos) Malformed(list, "'[' without ']'");
    auto values = ExpandGroup(list, item.substr(open + 1, close - open - 1));
    if (partial.size() * values.size() > kMaxHosts) {
      Malformed(list, fmt::format("more than {} hosts", kMaxHosts));
    }
    std::vector<std::string> next;
    next.reserve(partial.size() * values.size());
    for (const auto& p : partial) {
      for (const auto& v : values) next.push_back(p + v);
    }
    partial = std::move(next);
    pos = close + 1;
  }
  for (auto& p : partial) {
    if (p.empty()) Malformed(list, "an empty host name");
    out.push_back(std::move(p));
    if (out.size() > kMaxHosts) Malformed(list, fmt::format("more than {} hosts", kMaxHosts));
  }
}

}  // namespace

std::vector<std::string> ExpandSlurmHostlist(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    char c = i < list.size() ? list[i] : ',';
    if (c == '[') {
      if (++depth > 1) Malformed(list, "nested '['");
    } else if (c == ']') {
      if (--depth < 0) Malformed(list, "']' without '['");
    } else if (c == ',' && depth == 0) {
      std::string item = list.substr(start, i - start);
      if (item.empty()) Malformed(list, "an empty item");
      ExpandItem(list, item, out);
      start = i + 1;
    }
  }
  if (depth != 0) Malformed(list, "'[' without ']'");
  return out;
}

std::vector<int> ExpandSlurmTasksPerNode(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return ConfigError(fmt::format("Slurm tasks-per-node '{}' is malformed: {}", text, why));
  };
  std::vector<int> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string part =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t paren = part.find("(x");
    std::string count_text = part.substr(0, paren);
    int count = 0;
    auto [end, ec] =
        std::from_chars(count_text.data(), count_text.data() + count_text.size(), count);
    if (count_text.empty() || ec != std::errc() || end != count_text.data() + count_text.size() ||
        count < 1) {
      throw bad(fmt::format("'{}' is not a positive count", part));
    }
    int repeat = 1;
    if (paren != std::string::npos) {
      if (part.back() != ')') throw bad(fmt::format("'{}' lacks ')'", part));
      std::string r = part.substr(paren + 2, part.size() - paren - 3);
      auto [rend, rec] = std::from_chars(r.data(), r.data() + r.size(), repeat);
      if (r.empty() || rec != std::errc() || rend != r.data() + r.size() || repeat < 1 ||
          repeat > 1000000) {
        throw bad(fmt::format("'{}' has a bad repeat", part));
      }
    }
    if (out.size() + static_cast<size_t>(repeat) > 1000000) throw bad("more than 1000000 nodes");
    out.insert(out.end(), static_cast<size_t>(repeat), count);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace tandem::cluster
