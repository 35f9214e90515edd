// tandem's KVStore: MXNet 1.9's key-value store for data-parallel training,
// on tandem's own transport. docs/kvstore.md describes the semantics (sync and
// async consistency, placement, optimizers, environment variables) and how
// they differ from MXNet's.
//
//   auto kv = tandem::KVStore::Create("dist_sync");   // joins the job
//   kv->Init(3, weight);                              // worker 0 sends it
//   kv->Push(3, grad);                                 // sum over workers
//   kv->Pull(3, weight);                               // sees the update
//
// Thread-safety of KVStore: every method may be called from any thread, but
// calls are expected from one training thread, as in MXNet; the order in
// which one thread issues push and pull of a key is the order the store
// applies them. Asynchronous calls return a KVHandle; the tensors they were
// given must stay alive and unchanged (pushed values) or untouched (pull
// outputs) until the handle is done.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tandem/cluster.h"
#include "tandem/tensor.h"

namespace tandem {

class Cluster;

namespace kv {
class KvOperation;
}  // namespace kv

/// A key: an int or a string. One store takes keys of one kind only (as
/// MXNet: mixing them is an InvalidArgument).
class KVKey {
 public:
  KVKey(int key) : key_(key) {}                       // NOLINT: implicit on purpose
  KVKey(std::string key) : key_(std::move(key)) {}    // NOLINT
  KVKey(const char* key) : key_(std::string(key)) {}  // NOLINT
  bool is_string() const { return std::holds_alternative<std::string>(key_); }
  /// Requires !is_string().
  int int_key() const { return std::get<int>(key_); }
  /// Requires is_string().
  const std::string& string_key() const { return std::get<std::string>(key_); }
  /// "3" or "\"fc1_weight\"", for messages.
  std::string ToString() const;

 private:
  std::variant<int, std::string> key_;
};

/// The completion of an asynchronous call.
///
/// Thread-safety: any thread may wait on a handle, also several at once.
class KVHandle {
 public:
  /// A handle that is already done (what synchronous stores return).
  KVHandle() = default;
  explicit KVHandle(std::shared_ptr<kv::KvOperation> op) : op_(std::move(op)) {}

  /// Blocks until the call completed, at most the store's default wait
  /// (TANDEM_KV_TIMEOUT). Throws the call's error (InvalidArgument for bad
  /// input, PeerLost when a node of the job was lost, ProtocolError) or
  /// Timeout saying what was awaited from which servers.
  void Wait() const;
  /// As Wait(), with an explicit limit.
  void Wait(std::chrono::milliseconds timeout) const;
  /// True when the call completed (successfully or not); never blocks.
  bool Done() const;

 private:
  std::shared_ptr<kv::KvOperation> op_;
};

/// Hyper-parameters by MXNet's names, values as text
/// ({"learning_rate", "0.1"}, {"momentum", "0.9"}, ...).
using KVParams = std::map<std::string, std::string>;

/// What LoadCheckpoint restored for this worker.
struct KVCheckpoint {
  /// The store's round the checkpoint was taken at (docs/checkpoints.md,
  /// "Rounds"); pushes count on from it.
  uint64_t round = 0;
  /// The bytes this worker gave SaveCheckpoint (its step, data position,
  /// local optimizer state...).
  std::string user_state;
};

/// A key-value store for parameters. See the file comment.
class KVStore {
 public:
  /// Creates a store of `type`: "local" or "device" (one process, values of
  /// several local devices summed in place), "dist_sync", "dist_async",
  /// "dist_sync_device", "dist_async_device" (a worker of a job: joins it
  /// from the process environment, as Cluster::Join). Any thread. Throws
  /// InvalidArgument (unknown type, or a distributed type in a process that
  /// is not a worker), ConfigError (a job without servers) and what
  /// Cluster::Join throws.
  static std::unique_ptr<KVStore> Create(const std::string& type);
  /// Opens the distributed store `type` on a worker's node that joined
  /// already (Cluster::Join, or Collectives::Join's cluster()), so that the
  /// process uses the parameter server and the collectives together with
  /// one worker rank (docs/cluster.md, "One node, both strategies"). The
  /// store holds the node as well. A node opens one distributed store.
  /// Throws InvalidArgument (not distributed, not a worker, a store open
  /// already), ConfigError (a job without servers).
  static std::unique_ptr<KVStore> Create(const std::string& type, Cluster& cluster);

  /// A distributed store leaves the job in order (a barrier of all nodes),
  /// unless Leave() did; errors then are logged, not thrown.
  virtual ~KVStore() = default;

  /// Leaves the job now, in order (a distributed store: the final barrier
  /// of every node), so that a failure reaches the caller: a program that
  /// must end with the lost peer's exit code calls it before destroying the
  /// store. Call once no operation is in flight; afterwards only the
  /// destructor may be called. Idempotent (a second call does nothing); a
  /// local store has nothing to leave. Throws PeerLost, Timeout.
  virtual void Leave() {}

  /// The type it was created with.
  virtual const std::string& type() const = 0;
  /// This worker's rank (0 for a local store).
  virtual int Rank() const = 0;
  /// Workers in the job (1 for a local store).
  virtual int NumWorkers() const = 0;
  /// Servers in the job (0 for a local store).
  virtual int NumServers() const = 0;

  /// Initialises `key` with `value` (copied before returning). In a
  /// distributed store every worker calls Init with the same keys, shapes
  /// and dtypes; only worker 0's value is sent, then the workers meet in a
  /// barrier, as MXNet. Throws InvalidArgument (double init, mixed key
  /// kinds, empty or unsupported tensor), PeerLost, Timeout.
  virtual void Init(const KVKey& key, const TensorView& value) = 0;

  /// Pushes `values` (one per local device, same shape and dtype as the
  /// key; summed locally first) to `key`. Higher `priority` goes out first
  /// among requests not yet sent. Returns at once. Throws InvalidArgument
  /// at once for bad input (unknown key, shape or dtype mismatch), PeerLost
  /// when the job already failed; the handle reports later failures.
  virtual KVHandle PushAsync(const KVKey& key, const std::vector<TensorView>& values,
                             int priority = 0) = 0;
  /// Pulls the value of `key` into every tensor of `outs`. A pull issued
  /// after a push of the same key by this worker sees that push's round
  /// (dist_sync) or update (dist_async). Throws as PushAsync (also for an
  /// output of the wrong size).
  virtual KVHandle PullAsync(const KVKey& key, const std::vector<TensorView>& outs,
                             int priority = 0) = 0;
  /// Push then pull in one round trip: `outs` receive the value after this
  /// push's round. `outs` may alias `values`.
  virtual KVHandle PushPullAsync(const KVKey& key, const std::vector<TensorView>& values,
                                 const std::vector<TensorView>& outs, int priority = 0) = 0;
  /// Pulls only rows `row_ids` (strictly ascending) of a key whose first
  /// dimension is rows: `out` has shape {row_ids.size(), rest of the key's
  /// shape} and receives them in order. Only those rows travel.
  virtual KVHandle RowSparsePullAsync(const KVKey& key, const TensorView& out,
                                      const std::vector<int64_t>& row_ids, int priority = 0) = 0;

  /// Pushes only rows `row_ids` (strictly ascending) of `key`: `rows` has
  /// shape {row_ids.size(), rest of the key's shape}; the rows not named
  /// count as zero gradient. Only those rows travel. Throws as PushAsync.
  virtual KVHandle RowSparsePushAsync(const KVKey& key, const TensorView& rows,
                                      const std::vector<int64_t>& row_ids, int priority = 0) = 0;

  /// Blocking forms: the asynchronous call, then Wait().
  void Push(const KVKey& key, const std::vector<TensorView>& values, int priority = 0) {
    PushAsync(key, values, priority).Wait();
  }
  void Push(const KVKey& key, const TensorView& value, int priority = 0) {
    PushAsync(key, std::vector<TensorView>{value}, priority).Wait();
  }
  void Pull(const KVKey& key, const std::vector<TensorView>& outs, int priority = 0) {
    PullAsync(key, outs, priority).Wait();
  }
  void Pull(const KVKey& key, const TensorView& out, int priority = 0) {
    PullAsync(key, std::vector<TensorView>{out}, priority).Wait();
  }
  void PushPull(const KVKey& key, const TensorView& value, const TensorView& out,
                int priority = 0) {
    PushPullAsync(key, {value}, {out}, priority).Wait();
  }
  void RowSparsePull(const KVKey& key, const TensorView& out, const std::vector<int64_t>& row_ids,
                     int priority = 0) {
    RowSparsePullAsync(key, out, row_ids, priority).Wait();
  }
  void RowSparsePush(const KVKey& key, const TensorView& rows, const std::vector<int64_t>& row_ids,
                     int priority = 0) {
    RowSparsePushAsync(key, rows, row_ids, priority).Wait();
  }

  /// Init(key, value) followed by Pull(key, outs): every worker ends with
  /// worker 0's value. Blocking. Throws as Init and Pull.
  void Broadcast(const KVKey& key, const TensorView& value, const std::vector<TensorView>& outs,
                 int priority = 0) {
    Init(key, value);
    Pull(key, outs, priority);
  }

  /// Sets the optimizer the store applies to pushed gradients ("sgd",
  /// "nag", "adam", "adagrad", "rmsprop" with MXNet's parameters). Local
  /// stores run it on this process; distributed stores send it from worker 0
  /// to every server (then the workers meet in a barrier), so every worker
  /// must call it. Without it a store keeps the sum of each round's pushes
  /// (update_on_kvstore=false: pull the sums and update locally). Every
  /// store checks the parameters against their ranges (docs/optimizers.md,
  /// "Ranges") before anything is sent, so each worker that passes a value
  /// that cannot train throws, and no server sees it. Throws
  /// InvalidArgument (unknown optimizer or parameter, a value outside its
  /// range: "set_optimizer: optimizer 'sgd': parameter 'momentum' is 5,
  /// must be in [0, 1)"), PeerLost, Timeout.
  virtual void SetOptimizer(const std::string& name, const KVParams& params) = 0;

  /// MXNet's gradient compression: {"type": "2bit"|"1bit"|"none",
  /// "threshold": "0.5"}; pushes of float32 keys are then compressed with a
  /// residual per key (Init never is). Call before the first push, on every
  /// worker. Throws InvalidArgument.
  virtual void SetGradientCompression(const KVParams& params) = 0;

  /// Blocks until every worker called Barrier. Returns the workers that
  /// were members at its release, the same on every worker that passed it
  /// (Cluster::Barrier; a local store: epoch 0, worker 0). Throws PeerLost,
  /// Timeout.
  virtual Members Barrier() = 0;

  /// Saves the optimizer's states. A local store writes `path`; in a
  /// distributed store every worker calls it: worker 0 asks each server to
  /// write its own shard to "<path>.server<rank>" (on the server's file
  /// system) and waits for them, then the workers meet in a barrier; a
  /// failure is thrown on worker 0 (after the barrier). Throws
  /// InvalidArgument (no optimizer), IoError, PeerLost.
  virtual void SaveOptimizerStates(const std::string& path) = 0;
  /// Loads what SaveOptimizerStates wrote under `path` (the same number of
  /// servers), with the same optimizer set. Then the workers meet in a
  /// barrier. Throws as SaveOptimizerStates.
  virtual void LoadOptimizerStates(const std::string& path) = 0;

  /// Saves a consistent checkpoint of the whole store into `dir` (a
  /// directory every node can reach: the same machine or a shared file
  /// system) as round R, the store's round (the most pushes of any one key
  /// so far, counted on from a loaded checkpoint's round): every server
  /// writes its shard (keys, values, optimizer states and schedule), this
  /// worker writes `user_state` (and its compression residuals), each file
  /// atomically and durably, and worker 0 writes the round's manifest last;
  /// the two newest complete rounds are kept. docs/checkpoints.md gives
  /// the files and the protocol. Every worker calls it at the same point,
  /// after every push it made was waited for (the servers refuse a round in
  /// progress). Returns R. Distributed stores only. Throws InvalidArgument
  /// (a local store, a round in progress), IoError (naming the file),
  /// PeerLost, Timeout; every worker throws if any step failed.
  virtual uint64_t SaveCheckpoint(const std::string& dir, std::string_view user_state) = 0;

  /// Loads the newest consistent round of `dir`: worker 0 verifies every
  /// file of a round (manifest, checksums, headers) before anything is
  /// applied, falls back to the previous round when one is corrupt,
  /// truncated or missing (logging why), then the servers verify their
  /// shards against their keys and optimizer and only then apply them.
  /// Every worker calls it after Init of every key and SetOptimizer (the
  /// same as when saving), and gets its own user_state; the values are on
  /// the servers (pull them). Returns nullopt when `dir` holds no complete
  /// round. Throws IoError (no round verifies: every refusal named),
  /// InvalidArgument (another number of servers or workers, other keys or
  /// optimizer), PeerLost, Timeout; every worker throws if any step failed.
  virtual std::optional<KVCheckpoint> LoadCheckpoint(const std::string& dir) = 0;
};

}  // namespace tandem
