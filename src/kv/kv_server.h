// tandem's parameter server (docs/kvstore.md, "Server"; the protocol is
// docs/protocol-ps.md). It registers for the kv message types on a node's
// dispatcher before the node registers with the scheduler, and serves until
// the node leaves.
//
// Threads: the transport thread only decodes a request's metadata, books
// its bytes in the connection's RequestWindow (refusing it when the worker is
// over its bound) and routes it to the shard that owns its key (key %
// shards); each shard is a thread of its own (ServerShard). Server-wide
// commands (set-optimizer, save/load of optimizer states) run on shard 0.
// Store checkpoints (docs/checkpoints.md) stop every shard at a
// ShardRendezvous and run on the last shard thread to arrive.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "cluster/node_services.h"
#include "kv/buffer_pool.h"
#include "kv/checkpoint_format.h"
#include "kv/request_window.h"
#include "kv/server_optimizer.h"
#include "kv/server_shard.h"

namespace tandem::kv {

/// Thread-safety: constructed and started by the node's main thread; the
/// handler callbacks run on the transport thread; checkpoint work runs on a
/// shard thread while the others are parked; the checkpoint state below is
/// guarded by checkpoint_mu_.
class KvServer final : public net::TransportHandler {
 public:
  struct Options {
    /// TANDEM_KV_SERVER_THREADS: shards (threads that own keys).
    int threads = 2;
    /// TANDEM_KV_SERVER_POOL_BYTES: idle receive buffers kept for reuse.
    size_t pool_bytes = size_t{1} << 30;
    /// TANDEM_KV_INFLIGHT_BYTES: request bytes one connection (one worker)
    /// may have unanswered here before further requests are refused
    /// (request_window.h); workers apply the same bound before sending.
    uint64_t inflight_bytes = kDefaultInflightBytes;
    /// Makes the optimizer SetOptimizer names.
    OptimizerFactory optimizer_factory;
    /// Reads TANDEM_KV_SERVER_THREADS (default: the number of cores, at
    /// least 1 and at most 8), TANDEM_KV_SERVER_POOL_BYTES and
    /// TANDEM_KV_INFLIGHT_BYTES, and makes optimizers with
    /// kv::Optimizer::Create.
    static Options FromEnvironment(const base::Environment& env);
  };

  /// Registers for kvmsg::kFirst..kLast on `services.dispatcher`. Requests
  /// that arrive before Start() wait in their shard.
  KvServer(const cluster::NodeServices& services, Options options);
  /// Stops the shards. The transport must no longer deliver to this server
  /// (shut down first).
  ~KvServer() override;

  /// Stops the shard threads, so that none uses the transport or the logger
  /// any more: call before the node's Cluster (its transport) goes, also
  /// when the job failed with requests still in flight. Messages that arrive
  /// later are queued and never handled. Idempotent; any thread.
  void Stop();

  /// Called once the node has joined: takes this node's id and the number of
  /// workers from the node table and lets the shards work.
  void Start();

  /// Pushes and inits are received into recycled buffers (buffer_pool.h).
  std::span<std::byte> PayloadDestination(net::ConnectionId id, const net::Header& h,
                                          const std::string& meta) override;
  void OnMessage(net::ConnectionId id, net::Message&& msg) override;
  void OnDisconnected(net::ConnectionId id, const std::string& reason) override;

 private:
  void Reject(net::ConnectionId id, const net::Header& h, ErrorKind kind, const std::string& text);
  void Reply(net::ConnectionId id, const net::Header& h, std::string payload);
  // kCheckpoint: runs the command with every shard parked, then answers.
  void StartCheckpoint(net::ConnectionId id, net::Message&& msg);
  void RunCheckpoint(const CheckpointCommand& cmd);
  void SaveShard(const CheckpointCommand& cmd);
  void StageShard(const CheckpointCommand& cmd);
  void CommitShard(const CheckpointCommand& cmd);
  // kCheckpointOutcome and kCheckpointQuery, on the transport thread.
  void HandleOutcome(net::ConnectionId id, const net::Message& msg);

  cluster::NodeServices services_;
  ServerOptimizer optimizer_;
  BufferPool pool_;       // outlives the shards and their values
  RequestWindow window_;  // outlives the shards, which release into it
  // The buffer being received into, per connection; transport thread only.
  std::map<net::ConnectionId, ByteBuffer> receiving_;
  ShardContext context_;
  std::vector<std::unique_ptr<ServerShard>> shards_;

  // A verified checkpoint round, held between stage and commit.
  struct Staged {
    std::string dir;
    uint64_t round = 0;
    ServerCheckpoint content;
    std::unique_ptr<Optimizer> optimizer;  // loaded; null when the round has none
  };
  std::mutex checkpoint_mu_;
  std::optional<Staged> staged_;                            // guarded by checkpoint_mu_
  std::optional<CheckpointOutcome> outcome_;                // guarded by checkpoint_mu_
  std::vector<std::weak_ptr<ShardRendezvous>> rendezvous_;  // guarded by checkpoint_mu_
};

}  // namespace tandem::kv
