// The worker side of the distributed stores ("dist_sync", "dist_async" and
// their "_device" forms, which on CPU buffers behave the same): turns store
// calls into requests to the servers that hold each key's slices
// (docs/kvstore.md; docs/protocol-ps.md).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "base/thread_pool.h"
#include "kv/checkpoint_format.h"
#include "kv/compression/gradient_compression.h"
#include "kv/key_registry.h"
#include "kv/kv_client.h"
#include "kv/kv_messages.h"
#include "kv/store_settings.h"
#include "tandem/cluster.h"
#include "tandem/kvstore.h"

namespace tandem::kv {

/// Whether `type` names a distributed store: dist_sync, dist_async or their
/// _device forms.
bool IsDistributedType(const std::string& type);

/// Thread-safety: as KVStore (any thread); the key table is guarded by mu_.
class DistKVStore final : public KVStore {
 public:
  /// A store over a started `client`. With `membership` (a claim on the
  /// node the client runs on: KVStore::Create), the store holds it and
  /// leaves the job through it; without, the caller keeps the client alive
  /// and leaves (tests run several stores in one process this way). Throws
  /// InvalidArgument for a type that is not distributed, ConfigError for a
  /// job without servers.
  DistKVStore(std::string type, KvClient& client, StoreSettings settings,
              std::unique_ptr<Cluster> membership = nullptr);

  /// With a membership: Cluster::Finalize (the final barrier, when this is
  /// the node's last user) unless Leave() ran or an exception is unwinding
  /// (then it leaves at once); errors are logged.
  ~DistKVStore() override;

  /// With a membership: Cluster::Finalize, throwing its error (PeerLost,
  /// Timeout). Once only; the destructor then skips it.
  void Leave() override;

  const std::string& type() const override { return type_; }
  int Rank() const override { return client_.rank(); }
  int NumWorkers() const override { return client_.num_workers(); }
  int NumServers() const override { return client_.num_servers(); }
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
  Members Barrier() override;
  // Optimizer states and checkpoints: defined in dist_kvstore_checkpoints.cc.
  void SaveOptimizerStates(const std::string& path) override;
  void LoadOptimizerStates(const std::string& path) override;
  uint64_t SaveCheckpoint(const std::string& dir, std::string_view user_state) override;
  std::optional<KVCheckpoint> LoadCheckpoint(const std::string& dir) override;

 private:
  // Throws ConfigError for a job without servers.
  void RequireServers() const;
  KeyRequest Request(const KeyInfo& info, const KeySlice& slice, int priority) const;
  // Sends a push (with_reply: a push-pull) of `source` (one buffer holding
  // the key's summed value), replies into `out` when set.
  KVHandle SendPush(const KeyInfo& info, const void* source, void* out, int priority,
                    std::shared_ptr<KvOperation> op);
  // Sends `type` to every server and waits for every reply.
  void Broadcast(uint16_t type, const std::string& meta, const std::string& what);
  // Runs `step` (which does `what`) on the first worker (the lowest rank
  // that is a member: worker 0 until it leaves an elastic job,
  // docs/elastic.md), then a worker barrier; the first worker rethrows
  // step's error after the barrier, so the others never wait in vain. A
  // worker that chose a first worker which then left the job before the
  // barrier ended throws PeerLost: whether the step was done is unknown.
  void FirstWorkerThenBarrier(const std::string& what, const std::function<void()>& step);
  const void* SumIfNeeded(const KeyInfo& info, const std::vector<TensorView>& values,
                          const std::shared_ptr<KvOperation>& op);
  // Checkpoints (docs/checkpoints.md, "Protocol"): defined in
  // dist_kvstore_checkpoints.cc.
  // The largest push count of any key plus the loaded checkpoint's round.
  uint64_t CurrentRound();
  void CheckpointCommandToServers(CheckpointCommand::Phase phase, const std::string& dir,
                                  uint64_t round);
  // Worker 0 tells server 0 how its part of a checkpoint call ended; never
  // throws (logs).
  void ReportOutcome(bool found, uint64_t round, const std::exception_ptr& error);
  // The others ask server 0 for it: {found, round}; throws worker 0's error.
  std::pair<bool, uint64_t> QueryOutcome();
  void WriteOwnCheckpoint(const std::string& dir, uint64_t round, std::string_view user_state);
  // Reads and checks this worker's file of `round` against its keys;
  // changes nothing. Throws IoError, InvalidArgument naming the file.
  WorkerCheckpoint ReadOwnCheckpoint(const std::string& dir, uint64_t round);
  // Applies what ReadOwnCheckpoint returned (residuals, the round).
  KVCheckpoint ApplyOwnCheckpoint(WorkerCheckpoint c);

  std::unique_ptr<Cluster> membership_;  // this store's claim on its node, when given
  bool left_ = false;                    // Leave() ran (the caller's thread)
  std::string type_;
  KvClient& client_;
  StoreSettings settings_;
  UpdateMode mode_;
  // Each server's share of a large key (BalancedShares); empty: MXNet's
  // equal slices. Fixed at construction.
  std::vector<double> shares_;
  std::unique_ptr<base::ThreadPool> pool_;  // the local sum's threads
  std::mutex mu_;
  KeyRegistry keys_;               // guarded by mu_
  CompressionParams compression_;  // guarded by mu_; set before the first Init
  uint64_t round_base_ = 0;        // guarded by mu_; the loaded checkpoint's round
};

}  // namespace tandem::kv
