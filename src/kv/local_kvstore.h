// The single-process stores, "local" and "device" (docs/kvstore.md,
// "Local stores"): values pushed for several local devices are summed (with
// several threads above MXNET_KVSTORE_BIGARRAY_BOUND elements), then the
// optimizer runs here, on the worker, or, without one, the sum becomes the
// value (MXNet's KVStoreLocal without an updater). Every call completes
// before it returns; handles are already done.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kv/key_registry.h"
#include "kv/server_optimizer.h"
#include "kv/store_settings.h"
#include "tandem/kvstore.h"

namespace tandem::kv {

/// Thread-safety: any thread; every call holds mu_ while it runs.
class LocalKVStore final : public KVStore {
 public:
  /// `type` is "local" or "device" (else InvalidArgument). `factory` makes
  /// the optimizers SetOptimizer names.
  LocalKVStore(std::string type, StoreSettings settings, OptimizerFactory factory);

  const std::string& type() const override { return type_; }
  int Rank() const override { return 0; }
  int NumWorkers() const override { return 1; }
  int NumServers() const override { return 0; }
  void Init(const KVKey& key, const TensorView& value) override;
  KVHandle PushAsync(const KVKey& key, const std::vector<TensorView>& values,
                     int priority) override;
  KVHandle PullAsync(const KVKey& key, const std::vector<TensorView>& outs, int priority) override;
  KVHandle PushPullAsync(const KVKey& key, const std::vector<TensorView>& values,
                         const std::vector<TensorView>& outs, int priority) override;
  KVHandle RowSparsePullAsync(const KVKey& key, const TensorView& out,
                              const std::vector<int64_t>& row_ids, int priority) override;
  KVHandle RowSparsePushAsync(const KVKey& key, const TensorView& rows,
                              const std::vector<int64_t>& row_ids, int priority) override;
  void SetOptimizer(const std::string& name, const KVParams& params) override;
  void SetGradientCompression(const KVParams& params) override;
  Members Barrier() override { return Members{0, {0}}; }
  void SaveOptimizerStates(const std::string& path) override;
  void LoadOptimizerStates(const std::string& path) override;
  /// Not supported: throw InvalidArgument (docs/checkpoints.md).
  uint64_t SaveCheckpoint(const std::string& dir, std::string_view user_state) override;
  std::optional<KVCheckpoint> LoadCheckpoint(const std::string& dir) override;

 private:
  void PushLocked(KeyInfo& info, const std::vector<TensorView>& values);  // requires mu_
  void PullLocked(KeyInfo& info, const std::vector<TensorView>& outs);    // requires mu_

  const std::string type_;
  const StoreSettings settings_;
  ServerOptimizer optimizer_;  // the updater, run on this worker
  std::mutex mu_;
  KeyRegistry keys_;                                   // guarded by mu_
  std::map<uint64_t, std::vector<std::byte>> values_;  // by key id; guarded by mu_
  std::unique_ptr<base::ThreadPool> pool_;             // guarded by mu_
};

}  // namespace tandem::kv
