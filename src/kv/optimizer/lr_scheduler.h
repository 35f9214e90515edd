// Learning-rate schedules of MXNet 1.9 (python/mxnet/lr_scheduler.py):
// "factor", "multifactor", "poly" and "cosine", each with the optional
// linear or constant warm-up of MXNet's LRScheduler base class.
//
// A schedule maps num_update (the largest update count over all keys, as
// MXNet's Optimizer keeps it) to a learning rate, computed in double exactly
// as Python computes it. Factor and multifactor schedules are stateful (they
// multiply a running rate as num_update passes their steps), so the state
// is part of the optimizer's saved states. docs/optimizers.md, "Learning
// rate schedules", gives the formulas and parameter names.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/byte_io.h"

namespace tandem::kv {

class OptimizerParamReader;

/// One learning-rate schedule.
///
/// Thread-safety: not thread-safe; the optimizer calls it under its own
/// mutex.
class LrScheduler {
 public:
  /// The schedules by their parameter name.
  enum class Kind : uint8_t { kFactor = 1, kMultiFactor = 2, kPoly = 3, kCosine = 4 };

  /// Reads "lr_scheduler" and its "lr_scheduler.*" parameters from `params`
  /// and returns the schedule, or nullptr when "lr_scheduler" is absent or
  /// "none". `learning_rate` is the optimizer's, which (as in MXNet's
  /// Optimizer constructor) replaces the schedule's running base_lr.
  /// Throws InvalidArgument for an unknown schedule or a bad parameter
  /// (naming it), with MXNet's range checks.
  static std::unique_ptr<LrScheduler> Create(OptimizerParamReader& params, double learning_rate);

  virtual ~LrScheduler() = default;

  /// The learning rate for `num_update`, advancing the schedule's state as
  /// MXNet's __call__ does.
  virtual double Rate(int64_t num_update) = 0;

  /// The schedule's kind.
  virtual Kind kind() const = 0;

  /// Appends the mutable state (running base_lr, counters).
  void SaveState(base::ByteWriter& out) const;

  /// Reads what SaveState wrote. Throws InvalidArgument when the saved kind
  /// differs from this schedule's; ProtocolError when truncated. Leaves the
  /// state unchanged on a throw.
  void LoadState(base::ByteReader& in);

 protected:
  struct Warmup {
    int64_t steps = 0;
    double begin_lr = 0;
    double final_lr = 0.01;  ///< the schedule's own base_lr argument
    bool linear = true;
  };
  explicit LrScheduler(Warmup warmup) : warmup_(warmup) {}

  /// MXNet's get_warmup_lr; requires num_update < warmup steps.
  double WarmupRate(int64_t num_update) const;

  Warmup warmup_;
  double base_lr_ = 0.01;   ///< MXNet's running self.base_lr
  int64_t count_ = 0;       ///< FactorScheduler.count / MultiFactor.count
  int64_t step_index_ = 0;  ///< MultiFactorScheduler.cur_step_ind
};

}  // namespace tandem::kv
