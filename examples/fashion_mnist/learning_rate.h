// The learning rate of each step: the linear scaling rule with gradual
// warm-up (Goyal et al., "Accurate, Large Minibatch SGD", 2017), written as
// MXNet's lr_scheduler warm-up so that the servers' optimizer
// (docs/optimizers.md, "Learning-rate schedules") and the workers' compute
// the same rates. docs/training.md, "The scaling rule".
#pragma once

#include <cstdint>
#include <string>

#include "tandem/kvstore.h"

namespace fashion_mnist {

/// The rates of a run.
///
/// Thread-safety: a plain value.
struct LearningRate {
  double base = 0.05;        ///< the rate for one worker's batch
  double scale = 1.0;        ///< k of the rule (global batch / per-worker batch), 1 without it
  int64_t warmup_steps = 0;  ///< updates from `base` to `base * scale`; 0: none

  /// The target rate, base * scale.
  double target() const { return base * scale; }
  /// The rate of the update whose 1-based count is `num_update`: during
  /// warm-up (num_update < warmup_steps) base + (target - base) *
  /// num_update / warmup_steps, then target. Thread: any.
  double At(int64_t num_update) const;
  /// The servers' SGD parameters giving the same rates: learning_rate =
  /// target, and when warming up a factor schedule that never decays
  /// (factor 1) with MXNet's linear warm-up from base. `updates_per_step`
  /// is how many updates a key sees per step (1 in dist_sync, the number of
  /// workers in dist_async). Thread: any.
  tandem::KVParams ServerSgdParams(double momentum, double wd, int64_t updates_per_step) const;
};

}  // namespace fashion_mnist
