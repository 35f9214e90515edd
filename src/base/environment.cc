#include "base/environment.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "tandem/error.h"

extern char** environ;

namespace tandem::base {

Environment::Environment(std::map<std::string, std::string> vars) : vars_(std::move(vars)) {}

Environment Environment::FromProcess() {
  std::map<std::string, std::string> vars;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string kv(*entry);
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    vars.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return Environment(std::move(vars));
}

std::optional<std::string> Environment::Get(const std::string& name) const {
  auto it = vars_.find(name);
  if (it == vars_.end()) return std::nullopt;
  return it->second;
}

std::string Environment::GetString(const std::string& name, const std::string& fallback) const {
  auto value = Get(name);
  return value && !value->empty() ? *value : fallback;
}

int64_t Environment::GetInt(const std::string& name, int64_t fallback, int64_t min,
                            int64_t max) const {
  auto value = Get(name);
  if (!value || value->empty()) return fallback;
  int64_t parsed = 0;
  const char* begin = value->data();
  const char* end = begin + value->size();
  auto [ptr, ec] = std::from_chars(begin, end, parsed);
  if (ec != std::errc() || ptr != end) {
    throw ConfigError(fmt::format("environment variable {}='{}' is not an integer", name, *value));
  }
  if (parsed < min || parsed > max) {
    throw ConfigError(
        fmt::format("environment variable {}={} is out of range [{}, {}]", name, parsed, min, max));
  }
  return parsed;
}

bool Environment::GetBool(const std::string& name, bool fallback) const {
  auto value = Get(name);
  if (!value || value->empty()) return fallback;
  std::string lower = *value;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "1" || lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "0" || lower == "false" || lower == "no" || lower == "off") return false;
  throw ConfigError(fmt::format(
      "environment variable {}='{}' is not a boolean (use 1/0, true/false, yes/no, on/off)", name,
      *value));
}

double Environment::GetDouble(const std::string& name, double fallback, double min,
                              double max) const {
  auto value = Get(name);
  if (!value || value->empty()) return fallback;
  char* end = nullptr;
  const double v = std::strtod(value->c_str(), &end);
  if (end != value->c_str() + value->size() || !std::isfinite(v) || v < min || v > max) {
    throw ConfigError(fmt::format("environment variable {}='{}' is not a number between {} and {}",
                                  name, *value, min, max));
  }
  return v;
}

std::chrono::milliseconds Environment::GetSeconds(const std::string& name,
                                                  std::chrono::milliseconds fallback) const {
  auto value = Get(name);
  if (!value || value->empty()) return fallback;
  char* end = nullptr;
  double seconds = std::strtod(value->c_str(), &end);
  if (end != value->c_str() + value->size() || !std::isfinite(seconds) || seconds < 0 ||
      seconds > 1e9) {
    throw ConfigError(fmt::format(
        "environment variable {}='{}' is not a non-negative number of seconds", name, *value));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000.0)));
}

}  // namespace tandem::base
