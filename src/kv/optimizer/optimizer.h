// Server-side (and, with update_on_kvstore=false, worker-side) optimizers
// with MXNet's names, hyper-parameters and update rules: "sgd", "nag",
// "adam", "adagrad", "rmsprop". docs/optimizers.md gives each rule.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "tandem/tensor.h"

namespace tandem::kv {

/// Hyper-parameters by MXNet's names ("learning_rate", "momentum", "wd",
/// "rescale_grad", "clip_gradient", "beta1", "beta2", "epsilon", "gamma1",
/// "gamma2", "centered", "multi_precision", "lr_scheduler", ...), values as
/// text ("0.1", "true", ...). They travel from worker 0 to the servers as
/// they are.
using OptimizerParams = std::map<std::string, std::string>;

/// An optimizer and its per-key state (momentum, moments, master weights,
/// update counts).
///
/// Thread-safety: Update and UpdateRows may run concurrently for different
/// keys; calls for one key are serialised by the caller. SaveStates and
/// LoadStates must not run concurrently with either.
class Optimizer {
 public:
  /// Creates the optimizer `name` with `params`. Throws InvalidArgument
  /// naming an unknown optimizer, an unknown parameter, or a value that does
  /// not parse or is out of range.
  static std::unique_ptr<Optimizer> Create(const std::string& name, const OptimizerParams& params);

  virtual ~Optimizer() = default;

  /// The name it was created with ("sgd", ...).
  virtual const std::string& name() const = 0;

  /// Applies one update of `grad` to `weight`, the value held under `key`
  /// (on a server: the slice of a key it holds). weight and grad have the
  /// same dtype and element count; float32, float64 and float16 are
  /// accepted (float16 weights keep a float32 master copy when
  /// multi_precision is set). The learning rate follows the lr scheduler of
  /// num_update, the largest update count over all keys, as MXNet's
  /// Optimizer does (Adam's bias correction uses the key's own count).
  /// `weight` and `grad` must not overlap. Throws
  /// InvalidArgument (dtype or size mismatch, naming the key) with `weight`
  /// and the state unchanged.
  virtual void Update(uint64_t key, const TensorView& weight, const TensorView& grad) = 0;

  /// Applies one update of a row-sparse gradient (a row-sparse push): `grad`
  /// holds rows `rows` of a gradient shaped like `weight`, so grad.shape is
  /// {rows.size(), weight.shape[1], ...}; `rows` are strictly increasing and
  /// below weight.shape[0]. It counts as one update of `key`. Where MXNet
  /// updates lazily (sgd and adam with lazy_update=true, adagrad) only those
  /// rows of the weight and of its states change; otherwise the result is
  /// Update with a dense gradient that is zero outside `rows`.
  /// docs/optimizers.md, "Row-sparse gradients". Throws InvalidArgument
  /// (dtype, shape, a row out of order or range, adagrad with wd, naming the
  /// key) with `weight` and the state unchanged.
  virtual void UpdateRows(uint64_t key, const TensorView& weight, std::span<const int64_t> rows,
                          const TensorView& grad) = 0;

  /// Every key's state and update count, in the format of
  /// docs/optimizers.md (versioned, with a checksum).
  virtual std::string SaveStates() const = 0;

  /// Replaces every key's state with `bytes` from SaveStates of an
  /// optimizer of the same name. Throws InvalidArgument (another optimizer,
  /// a wrong version, a bad checksum, truncated bytes) with the current
  /// state unchanged.
  virtual void LoadStates(std::string_view bytes) = 0;
};

}  // namespace tandem::kv
