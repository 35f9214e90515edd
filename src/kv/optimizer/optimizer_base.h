// What the five optimizers share: MXNet's Optimizer base class (learning
// rate and schedule, wd, rescale_grad, clip_gradient, multi_precision,
// update counts), the per-key states, validation of Update's arguments, and
// the saved-states format of docs/optimizers.md. Each optimizer adds only
// its hyper-parameters and its kernel (sgd_optimizer.cc, nag_optimizer.cc,
// adam_optimizer.cc, adagrad_optimizer.cc, rmsprop_optimizer.cc).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "kv/optimizer/element_math.h"
#include "kv/optimizer/key_state_store.h"
#include "kv/optimizer/lr_scheduler.h"
#include "kv/optimizer/optimizer.h"
#include "kv/optimizer/optimizer_params.h"

namespace tandem::kv {

/// The hyper-parameters of MXNet's Optimizer base class, as parsed.
struct CommonHyperParams {
  double learning_rate = 0.01;
  double wd = 0;
  double rescale_grad = 1;
  std::optional<double> clip_gradient;  ///< absent is MXNet's None
  bool multi_precision = false;
  int64_t begin_num_update = 0;
};

/// One call of an optimizer's kernel: `count` elements of `weight`, `grad`
/// and the key's state arrays, all typed per the precision's KernelTypes.
/// Under multi-precision the kernel runs as kF32 on slices of the master
/// copy, with the gradient widened to float32. The arrays do not overlap.
struct KernelCall {
  double lr = 0;     ///< the scheduled learning rate (Python's double)
  int64_t t = 0;     ///< the key's update count after this update
  size_t count = 0;  ///< elements
  void* weight = nullptr;
  const void* grad = nullptr;
  std::array<void*, 3> states{};  ///< the first NumStates() are valid
};

/// The shared part of every optimizer.
///
/// Thread-safety: as Optimizer: Update may run concurrently for different
/// keys (the key table takes a shared lock, the update counters are atomic,
/// the schedule has its own mutex); one key's updates are serialised by the
/// caller; SaveStates/LoadStates must not overlap Update.
class OptimizerBase : public Optimizer {
 public:
  const std::string& name() const override { return name_; }
  void Update(uint64_t key, const TensorView& weight, const TensorView& grad) override;
  void UpdateRows(uint64_t key, const TensorView& weight, std::span<const int64_t> rows,
                  const TensorView& grad) override;
  std::string SaveStates() const override;
  void LoadStates(std::string_view bytes) override;

  /// MXNet's num_update: the largest update count over all keys.
  int64_t num_update() const { return num_update_.load(); }

 protected:
  /// Reads the common hyper-parameters from `params` with
  /// `default_learning_rate` (MXNet's per-optimizer default) and the
  /// schedule. Throws InvalidArgument for a bad value.
  OptimizerBase(std::string name, OptimizerParamReader& params, double default_learning_rate);

  /// How many state arrays each key needs (0 to 3).
  virtual size_t NumStates() const = 0;

  /// Runs the update rule over `call`. Never throws.
  virtual void RunKernel(Precision precision, const KernelCall& call) = 0;

  /// Whether a row-sparse gradient updates only its rows (MXNet's lazy
  /// update) for a key with (`has_master`) or without a master copy.
  /// Default: no, the update is dense with zero rows.
  virtual bool LazyRows(bool has_master) const {
    (void)has_master;
    return false;
  }

  /// Throws InvalidArgument when this optimizer cannot update rows lazily
  /// as configured (adagrad with wd). Default: it can.
  virtual void CheckLazyRows(uint64_t key) const { (void)key; }

  /// The rule of a lazy row update over `call` (one row). Default: the
  /// dense rule, which is MXNet's when its row kernel computes the same.
  virtual void RunRowKernel(Precision precision, const KernelCall& call) {
    RunKernel(precision, call);
  }

  const CommonHyperParams& common() const { return common_; }

  /// True when MXNet's kernels clip the gradient: Python passes
  /// clip_gradient only when truthy, and the kernel clips when the float32
  /// value is >= 0.
  bool KernelClipsGradient() const;

 private:
  std::unique_ptr<KeyState> NewKeyState(const TensorView& weight) const;
  void CheckDTypes(uint64_t key, const TensorView& weight, const TensorView& grad) const;
  KeyState& StateFor(uint64_t key, const TensorView& weight);
  KernelCall BeginUpdate(KeyState& state);
  // Runs the rule over elements [first, first + count) of the key, with
  // `grad` holding those `count` gradient values (in the weight's dtype).
  void RunSlice(KeyState& state, KernelCall call, const TensorView& weight, size_t first,
                size_t count, const void* grad, bool rows);
  double ScheduledRate();

  std::string name_;
  CommonHyperParams common_;
  std::unique_ptr<LrScheduler> scheduler_;
  std::mutex scheduler_mu_;  // guards scheduler_'s state
  std::atomic<int64_t> num_update_;
  KeyStateStore states_;
};

/// The optimizers, one file each. Each reads its parameters from `params`
/// (the caller calls Finish() afterwards) and throws InvalidArgument for a
/// bad one.
std::unique_ptr<Optimizer> MakeSgdOptimizer(OptimizerParamReader& params);
std::unique_ptr<Optimizer> MakeNagOptimizer(OptimizerParamReader& params);
std::unique_ptr<Optimizer> MakeAdamOptimizer(OptimizerParamReader& params);
std::unique_ptr<Optimizer> MakeAdaGradOptimizer(OptimizerParamReader& params);
std::unique_ptr<Optimizer> MakeRmsPropOptimizer(OptimizerParamReader& params);

}  // namespace tandem::kv
