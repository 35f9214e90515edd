// Typed reading of an optimizer's text hyper-parameters (OptimizerParams),
// with MXNet's defaults supplied by the caller, and the check that nothing
// unknown was passed.
//
// Values are parsed as Python would parse them on the worker: a number is a
// double ("0.1", "1e-8", "-1"), an integer is a base-10 int64, a bool is
// "true"/"false"/"1"/"0" (any case). docs/optimizers.md lists every accepted
// name per optimizer.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kv/optimizer/optimizer.h"

namespace tandem::kv {

/// Reads hyper-parameters of one optimizer, remembering every name it was
/// asked for so that Finish() can reject the rest.
///
/// Thread-safety: one thread; it lives only while an optimizer is created.
class OptimizerParamReader {
 public:
  /// `params` must outlive the reader; `optimizer` names it in errors.
  OptimizerParamReader(const OptimizerParams& params, std::string optimizer);

  /// Where a number must lie: between lo and hi, each end open or closed.
  struct Range {
    double lo;
    double hi;
    bool lo_open;
    bool hi_open;
    /// "[0, 1)", "(0, 3.4e+38]".
    std::string ToString() const;
  };
  /// The ranges of MXNet's hyper-parameters (docs/optimizers.md, "Ranges"):
  /// rates, decays, epsilons >= 0; the gradient scale > 0; momenta and
  /// decay rates of moving averages in [0, 1). Every end is within float32,
  /// which the kernels compute in.
  static const Range kNonNegative;
  static const Range kPositive;
  static const Range kFraction;

  /// The value of `name` as a double, or `fallback` when absent. Throws
  /// InvalidArgument naming the parameter and the text when it does not
  /// parse, is not finite or lies beyond float32's range.
  double GetDouble(std::string_view name, double fallback);

  /// As GetDouble, and throws InvalidArgument "<optimizer>: parameter
  /// '<name>' is <value>, must be in <range>" when the value (given or the
  /// fallback) lies outside `range`.
  double GetDoubleIn(std::string_view name, double fallback, const Range& range);

  /// The value of `name` as a double, or nullopt when absent (MXNet's
  /// `None`). Throws as GetDouble.
  std::optional<double> GetOptionalDouble(std::string_view name);

  /// The value of `name` as an int64, or `fallback`. Throws InvalidArgument
  /// when it is not a base-10 integer.
  int64_t GetInt(std::string_view name, int64_t fallback);

  /// The value of `name` as a comma-separated list of int64 ("10,20,30").
  /// Throws InvalidArgument when absent or when an element does not parse.
  std::vector<int64_t> GetIntList(std::string_view name);

  /// The value of `name` as a bool, or `fallback`. Throws InvalidArgument
  /// for anything but true/false/1/0 (any case).
  bool GetBool(std::string_view name, bool fallback);

  /// The text of `name`, or `fallback`.
  std::string GetString(std::string_view name, std::string_view fallback);

  /// True when `name` is present (and marks it as accepted).
  bool Has(std::string_view name);

  /// Throws InvalidArgument with `what` as the message prefix:
  /// "<optimizer>: parameter '<name>' <what>".
  [[noreturn]] void Fail(std::string_view name, std::string_view what) const;

  /// Throws InvalidArgument naming the first parameter nobody asked for and
  /// listing the accepted ones. Call after every Get.
  void Finish() const;

 private:
  const std::string* Find(std::string_view name);

  const OptimizerParams& params_;
  std::string optimizer_;
  std::set<std::string, std::less<>> accepted_;
};

}  // namespace tandem::kv
