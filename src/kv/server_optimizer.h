// The optimizer a server applies to its keys (MXNet's server-side updater),
// set by worker 0's SetOptimizer and shared by every shard thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "kv/optimizer/optimizer.h"

namespace tandem::kv {

/// Makes an optimizer from a name and parameters (kv::Optimizer::Create in
/// a real server; tests may pass their own). Throws InvalidArgument.
using OptimizerFactory =
    std::function<std::unique_ptr<Optimizer>(const std::string&, const OptimizerParams&)>;

/// Thread-safety: any thread. Update holds a shared lock, so shards update
/// different keys in parallel; Set, Save and Load hold it exclusively, so
/// they never overlap an update (kv::Optimizer's requirement).
class ServerOptimizer {
 public:
  explicit ServerOptimizer(OptimizerFactory factory) : factory_(std::move(factory)) {}

  /// Replaces the optimizer (and so every key's state) with a new one, as a
  /// second set_optimizer does in MXNet. Throws InvalidArgument (unknown
  /// name or parameter) with the old optimizer kept.
  void Set(const std::string& name, const OptimizerParams& params);

  /// True once Set succeeded.
  bool active() const;

  /// Applies `grad` to `weight` under `key`. Requires active(). Throws what
  /// Optimizer::Update throws.
  void Update(uint64_t key, const TensorView& weight, const TensorView& grad);

  /// Applies a row-sparse gradient (Optimizer::UpdateRows). Requires
  /// active(). Throws what Optimizer::UpdateRows throws.
  void UpdateRows(uint64_t key, const TensorView& weight, std::span<const int64_t> rows,
                  const TensorView& grad);

  /// Writes every key's state to `path` (the file is replaced atomically via
  /// a temporary). Throws InvalidArgument without an optimizer, IoError.
  void Save(const std::string& path) const;

  /// Reads states that Save wrote. Throws InvalidArgument (no optimizer,
  /// another optimizer's states, corrupt file), IoError.
  void Load(const std::string& path);

  /// For a store checkpoint (docs/checkpoints.md): the optimizer's name
  /// and SaveStates(), or nullopt when none is set. Never throws but
  /// bad_alloc.
  std::optional<std::pair<std::string, std::string>> Snapshot() const;

  /// A new optimizer made like the current one (same name and parameters)
  /// holding `states`, for Replace once every server verified its
  /// checkpoint; the current one is untouched. Throws InvalidArgument (no
  /// optimizer set, another optimizer's name, states LoadStates refuses).
  std::unique_ptr<Optimizer> LoadedCopy(const std::string& name, std::string_view states) const;

  /// Swaps in `loaded` (from LoadedCopy). Never throws.
  void Replace(std::unique_ptr<Optimizer> loaded);

 private:
  OptimizerFactory factory_;
  mutable std::shared_mutex mu_;
  std::unique_ptr<Optimizer> optimizer_;  // guarded by mu_
  OptimizerParams params_;                // optimizer_'s parameters; guarded by mu_
};

}  // namespace tandem::kv
