#include "kv/optimizer/optimizer_params.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

#include "tandem/error.h"

namespace tandem::kv {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::optional<int64_t> ParseInt(std::string_view text) {
  text = Trim(text);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

}  // namespace

OptimizerParamReader::OptimizerParamReader(const OptimizerParams& params, std::string optimizer)
    : params_(params), optimizer_(std::move(optimizer)) {}

const std::string* OptimizerParamReader::Find(std::string_view name) {
  accepted_.emplace(name);
  auto it = params_.find(std::string(name));
  return it == params_.end() ? nullptr : &it->second;
}

void OptimizerParamReader::Fail(std::string_view name, std::string_view what) const {
  throw InvalidArgument(fmt::format("optimizer '{}': parameter '{}' {}", optimizer_, name, what));
}

bool OptimizerParamReader::Has(std::string_view name) { return Find(name) != nullptr; }

std::optional<double> OptimizerParamReader::GetOptionalDouble(std::string_view name) {
  const std::string* text = Find(name);
  if (text == nullptr) return std::nullopt;
  std::string_view t = Trim(*text);
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  double value = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (t.empty() || ec != std::errc() || end != t.data() + t.size() || !std::isfinite(value)) {
    Fail(name, fmt::format("is '{}', expected a finite number", *text));
  }
  if (std::fabs(value) > std::numeric_limits<float>::max()) {
    Fail(name, fmt::format("is {}, beyond float32's range (the update kernels compute in float32)",
                           value));
  }
  return value;
}

double OptimizerParamReader::GetDouble(std::string_view name, double fallback) {
  return GetOptionalDouble(name).value_or(fallback);
}

const OptimizerParamReader::Range OptimizerParamReader::kNonNegative{
    0, std::numeric_limits<float>::max(), false, false};
const OptimizerParamReader::Range OptimizerParamReader::kPositive{
    0, std::numeric_limits<float>::max(), true, false};
const OptimizerParamReader::Range OptimizerParamReader::kFraction{0, 1, false, true};

std::string OptimizerParamReader::Range::ToString() const {
  return fmt::format("{}{}, {}{}", lo_open ? "(" : "[", static_cast<float>(lo),
                     static_cast<float>(hi), hi_open ? ")" : "]");
}

double OptimizerParamReader::GetDoubleIn(std::string_view name, double fallback,
                                         const Range& range) {
  const double value = GetDouble(name, fallback);
  const bool above_lo = range.lo_open ? value > range.lo : value >= range.lo;
  const bool below_hi = range.hi_open ? value < range.hi : value <= range.hi;
  if (!above_lo || !below_hi) {
    Fail(name, fmt::format("is {}, must be in {}", value, range.ToString()));
  }
  return value;
}

int64_t OptimizerParamReader::GetInt(std::string_view name, int64_t fallback) {
  const std::string* text = Find(name);
  if (text == nullptr) return fallback;
  auto value = ParseInt(*text);
  if (!value) Fail(name, fmt::format("is '{}', expected an integer", *text));
  return *value;
}

std::vector<int64_t> OptimizerParamReader::GetIntList(std::string_view name) {
  const std::string* text = Find(name);
  if (text == nullptr) Fail(name, "is required (a comma-separated list of integers)");
  std::vector<int64_t> out;
  std::string_view rest = Trim(*text);
  // Accept Python's list spelling "[10, 20]" as well as "10,20".
  if (!rest.empty() && rest.front() == '[' && rest.back() == ']') {
    rest = rest.substr(1, rest.size() - 2);
  }
  while (true) {
    const size_t comma = rest.find(',');
    auto value = ParseInt(rest.substr(0, comma));
    if (!value)
      Fail(name, fmt::format("is '{}', expected a comma-separated list of integers", *text));
    out.push_back(*value);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

bool OptimizerParamReader::GetBool(std::string_view name, bool fallback) {
  const std::string* text = Find(name);
  if (text == nullptr) return fallback;
  const std::string v = Lower(Trim(*text));
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  Fail(name, fmt::format("is '{}', expected true, false, 1 or 0", *text));
}

std::string OptimizerParamReader::GetString(std::string_view name, std::string_view fallback) {
  const std::string* text = Find(name);
  return text == nullptr ? std::string(fallback) : *text;
}

void OptimizerParamReader::Finish() const {
  for (const auto& [name, value] : params_) {
    if (!accepted_.contains(name)) {
      std::string list;
      for (const auto& a : accepted_) list += (list.empty() ? "" : ", ") + a;
      throw InvalidArgument(fmt::format(
          "optimizer '{}': unknown parameter '{}' (value '{}'); accepted parameters: {}",
          optimizer_, name, value, list));
    }
  }
}

}  // namespace tandem::kv
