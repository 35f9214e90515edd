// One of a server's worker threads and the keys it owns
// (docs/kvstore.md, "Server"). The transport thread only decodes and routes
// (KvServer); a shard validates, merges, updates and answers. A key always
// goes to the same shard (key % shards), so its state needs no lock, and
// requests of one worker on one key are handled in the order they were sent
// (one connection, one FIFO queue).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>

#include "base/logger.h"
#include "base/stats.h"
#include "kv/buffer_pool.h"
#include "kv/byte_buffer.h"
#include "kv/checkpoint_format.h"
#include "kv/kv_messages.h"
#include "kv/request_window.h"
#include "kv/server_optimizer.h"
#include "kv/shard_rendezvous.h"
#include "kv/sync_merge.h"
#include "net/transport.h"

namespace tandem::kv {

/// What every shard of one server shares. Written before the shards start,
/// read-only afterwards.
struct ShardContext {
  net::Transport* transport = nullptr;
  base::Logger* log = nullptr;
  ServerOptimizer* optimizer = nullptr;
  BufferPool* pool = nullptr;  ///< recycles payload, merge and value buffers
  int self_id = -1;            ///< this server's node id (the sender of replies)
  int num_workers = 0;
  /// Requests queued for the shard threads, all shards together
  /// (tandem_kv_server_queued_requests, docs/metrics.md); may be null.
  base::Gauge* queued = nullptr;
  /// dist_sync rounds some workers pushed to and others not yet, all shards
  /// together (tandem_kv_server_open_rounds, docs/metrics.md); may be null.
  base::Gauge* open_rounds = nullptr;
  /// The request bytes each connection has unanswered; every reply releases
  /// its request here before it is sent. May be null.
  RequestWindow* window = nullptr;
  /// Stops the whole job with `cause` (Membership::StopJob); called on a
  /// shard thread when a job-wide command fails. May be empty.
  std::function<void(const std::exception& cause)> stop_job;
};

/// A request as a shard receives it.
struct ShardItem {
  net::ConnectionId connection = 0;
  net::Message msg;
  std::optional<KeyRequest> request;  ///< set for the key-addressed types
  /// Set instead of a message: the shard parks there (ShardRendezvous).
  std::shared_ptr<ShardRendezvous> rendezvous;
  /// Set instead of a message: this worker rank left the elastic job
  /// (docs/elastic.md); its rounds complete without it from now on.
  std::optional<int> departed_worker;
};

/// Thread-safety: Post and Start may be called from any thread; everything
/// else (the key table, merges, replies) runs on the shard's own thread.
class ServerShard {
 public:
  /// Starts the thread; it handles nothing until Start().
  ServerShard(const ShardContext& context, int index);
  /// Stops the thread; queued requests are dropped unanswered (the node is
  /// going away).
  ~ServerShard();
  ServerShard(const ServerShard&) = delete;

  /// Stops and joins the thread (what is queued or posted later is never
  /// handled, nor answered). Idempotent; any thread but the shard's.
  void Stop();
  ServerShard& operator=(const ServerShard&) = delete;

  /// Lets the thread handle what was and will be posted. The context must be
  /// complete by now.
  void Start();

  /// Queues a request for this shard.
  void Post(ShardItem item);

  // Checkpoint access (docs/checkpoints.md, "Protocol"). Each requires that
  // the caller is the work of a ShardRendezvous this shard's thread is
  // parked in (or is that thread).

  /// Appends a copy of every key slice this shard holds. Throws
  /// InvalidArgument naming a key whose dist_sync round is in progress
  /// (some workers pushed, not all): the store is not at a round boundary.
  void ExportKeys(std::vector<SavedKey>* out) const;
  /// Throws InvalidArgument unless every key this shard holds is in `saved`
  /// with the same dtype and slice and no round is in progress; adds the
  /// keys it holds to `matched`.
  void CheckRestorable(const std::map<uint64_t, const SavedKey*>& saved,
                       std::set<uint64_t>* matched) const;
  /// Replaces the value of every key it holds with the one in `saved`.
  /// Requires that CheckRestorable accepted `saved`. Never throws but
  /// bad_alloc.
  void RestoreKeys(const std::map<uint64_t, const SavedKey*>& saved);

 private:
  struct StoredKey {
    KeyRequest layout;                  // dtype, total, offset, count, row length at init
    std::shared_ptr<ByteBuffer> value;  // copy-on-write: replies may hold it
    SyncMerge merge;
    std::deque<ShardItem> waiting;  // requests of workers blocked by the round
    bool draining = false;
    // The current round's row-sparse pushes: the union of their rows, and
    // whether a dense push joined (then the update is dense).
    std::set<uint64_t> round_rows;
    bool round_dense = false;
  };

  void Loop();
  void Handle(ShardItem& item);
  // Logs and answers a request that threw; stops the job for a job-wide one.
  void Failed(const ShardItem& item, ErrorKind kind, const std::exception& e);
  void HandleInit(ShardItem& item);
  void HandlePush(ShardItem& item);
  void HandlePull(ShardItem& item);
  void HandleControl(ShardItem& item);
  void FinishRound(uint64_t key, StoredKey& k);
  // True when every worker that is still a member pushed in k's round.
  bool RoundComplete(const StoredKey& k) const;
  // A worker left the elastic job: rounds that waited only for it end now.
  void Depart(int worker);
  // The optimizer's update of `k` with `grad` (dense over the slice): with
  // `rows` (global row numbers) as a row-sparse update of those rows only
  // (kv::Optimizer::UpdateRows: MXNet's lazy updates), else dense.
  void ApplyUpdate(uint64_t key, StoredKey& k, ByteBuffer& grad, const std::set<uint64_t>* rows);
  void Drain(StoredKey& k);
  ByteBuffer DenseGradient(const KeyRequest& q, net::Message& msg) const;
  // A value whose buffer goes back to the pool when its last holder (the key
  // or a reply being sent) lets go.
  std::shared_ptr<ByteBuffer> MakeValue(ByteBuffer b) const;
  // Makes k.value exclusively ours before an in-place update.
  void Unshare(StoredKey& k) const;
  void ReplyValue(net::ConnectionId c, const net::Header& request,
                  const std::shared_ptr<ByteBuffer>& value);
  void ReplyAck(net::ConnectionId c, const net::Header& request);
  void ReplyError(net::ConnectionId c, const net::Header& request, ErrorKind kind,
                  const std::string& text);
  // Releases the request's bytes (RequestWindow) and transmits `m`.
  void Send(net::ConnectionId c, net::OutgoingMessage m);
  // Hands `m` to the transport; a failure is logged (the node is going).
  void Transmit(net::ConnectionId c, net::OutgoingMessage m);
  // Holds `item` until the worker's current round of its key ends, and
  // tells the worker (a kParked receipt).
  void Park(StoredKey& k, ShardItem& item);
  // Tells the worker that request `request` waits for other workers
  // (kvmsg::kReceipt); a merged push's bytes leave the window first.
  void SendReceipt(net::ConnectionId c, const net::Header& request, Receipt::State state);

  const ShardContext& ctx_;
  const int index_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ShardItem> queue_;  // guarded by mu_
  bool started_ = false;         // guarded by mu_
  bool stopping_ = false;        // guarded by mu_

  std::unordered_map<uint64_t, StoredKey> keys_;  // shard thread only
  std::set<int> departed_;  // worker ranks that left the elastic job; shard thread only
  std::thread thread_;
};

}  // namespace tandem::kv
