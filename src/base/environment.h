// A snapshot of the process environment, taken once and passed down.
//
// Nothing below main() reads getenv(): code receives an Environment, so tests
// can build one from a map and two nodes in one process can see different
// variables.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace tandem::base {

/// An immutable set of environment variables with typed accessors that throw
/// tandem::ConfigError naming the variable and its bad value.
/// Thread-safety: immutable after construction; any thread may read.
class Environment {
 public:
  /// Builds an environment from explicit variables (for tests).
  explicit Environment(std::map<std::string, std::string> vars = {});

  /// Captures the current process's environ.
  static Environment FromProcess();

  /// The value of `name`, or nothing when unset. An empty value counts as set.
  std::optional<std::string> Get(const std::string& name) const;

  /// The value of `name`, or `fallback` when unset or empty.
  std::string GetString(const std::string& name, const std::string& fallback) const;

  /// An integer variable; `fallback` when unset or empty. Throws ConfigError
  /// when the value is not an integer in [min, max].
  int64_t GetInt(const std::string& name, int64_t fallback, int64_t min = INT64_MIN,
                 int64_t max = INT64_MAX) const;

  /// A decimal number ("2.5", "1e-3"); `fallback` when unset or empty.
  /// Throws ConfigError, naming the variable and the range, when the value
  /// is not a finite number in [min, max].
  double GetDouble(const std::string& name, double fallback, double min, double max) const;

  /// A boolean variable: 1/0, true/false, yes/no, on/off (any case).
  bool GetBool(const std::string& name, bool fallback) const;

  /// A duration given in seconds, fractions allowed ("0.5"). Throws
  /// ConfigError when negative or unparsable.
  std::chrono::milliseconds GetSeconds(const std::string& name,
                                       std::chrono::milliseconds fallback) const;

  /// All variables, for handing to a child process.
  const std::map<std::string, std::string>& vars() const { return vars_; }

 private:
  std::map<std::string, std::string> vars_;
};

}  // namespace tandem::base
