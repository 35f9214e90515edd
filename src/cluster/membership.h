// A node's side of the membership protocol (docs/protocol-cluster.md):
// register with the scheduler, receive the node table, barriers, heartbeats,
// and the news that a node was lost.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>
#include <functional>

#include "base/clock.h"
#include "base/logger.h"
#include "cluster/cluster_messages.h"
#include "net/transport.h"

namespace tandem::cluster {

/// Thread-safety: transport callbacks and the heartbeat thread update the
/// state under `mu_`; public methods may be called from any thread, and
/// Barrier calls are serialised by `barrier_mu_`. Nothing is sent while
/// `mu_` is held.
class Membership final : public net::TransportHandler {
 public:
  struct Options {
    Role role = Role::kWorker;
    int requested_rank = -1;
    net::Endpoint scheduler;  ///< where to connect
    std::string host;         ///< this node's announced address
    uint16_t port = 0;        ///< this node's listening port
    std::chrono::milliseconds connect_timeout{120000};
    std::chrono::milliseconds start_timeout{300000};
    std::chrono::milliseconds barrier_timeout{600000};
    std::chrono::milliseconds heartbeat_interval{1000};
    std::chrono::milliseconds heartbeat_timeout{10000};
  };

  /// Receives node-bound cluster messages (msg::kNodeBoundFirst..Last) and
  /// OnDisconnected from `transport` through a dispatcher.
  Membership(Options options, net::Transport& transport, base::Logger& log,
             const base::Clock& clock);
  /// Stops heartbeats and closes the scheduler connection.
  ~Membership() override;

  /// Connects to the scheduler, registers, and blocks until the node table
  /// arrives; then starts heartbeats and renames the logger "<role> <rank>".
  /// Throws Timeout (scheduler unreachable, or the job did not form: the
  /// scheduler's error names who was missing), ConfigError (rejected:
  /// e.g. more workers than DMLC_NUM_WORKER), AuthFailed, PeerLost.
  void Join();

  /// The job's node table and this node's entry; valid after Join().
  const NodeTable& table() const { return *table_; }
  const NodeInfo& self() const { return table_->nodes[static_cast<size_t>(self_id_)]; }

  /// See tandem::Cluster::Barrier. `final` marks Finalize()'s barrier.
  void Barrier(int groups, bool final = false);

  /// Throws the job's failure (PeerLost, ...) if there is one.
  void CheckHealth() const;

  /// The time since this node last heard from the scheduler (any message;
  /// heartbeat replies keep it short). Any thread.
  std::chrono::milliseconds SinceLastHeard() const;

  /// Barrier over all nodes, then tells the scheduler this node leaves.
  void Finalize();

  /// Closes the connection without ceremony (a process going away).
  void Close();

  /// Called once with the text of the job's failure (a lost node, the lost
  /// scheduler, a start time-out) when it is first learnt; at once if the
  /// failure is already known. Runs on the thread that learnt it (usually
  /// the transport's) while Membership holds its lock: it must be quick and
  /// must not call back into Membership. Services use it to fail their
  /// pending operations with PeerLost instead of waiting.
  using FailureListener = std::function<void(const std::string& text)>;
  void AddFailureListener(FailureListener listener);

 private:
  enum class FailureKind { kPeerLost, kRejected, kTimeout };
  struct BarrierWait {
    bool done = false;
    bool timed_out = false;
    std::optional<std::string> error;
  };

  void OnMessage(net::ConnectionId id, net::Message&& msg) override;
  void OnDisconnected(net::ConnectionId id, const std::string& reason) override;
  void Fail(FailureKind kind, std::string text);  // requires mu_
  [[noreturn]] void ThrowFailure() const;          // requires mu_
  void HeartbeatLoop();
  void Send(uint16_t type, std::string meta, uint64_t request_id = 0);

  const Options options_;
  net::Transport& transport_;
  base::Logger& log_;
  const base::Clock& clock_;

  std::atomic<net::ConnectionId> conn_{0};
  std::optional<NodeTable> table_;  // written once under mu_, then read-only
  int self_id_ = -1;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<std::pair<FailureKind, std::string>> failure_;
  bool connected_ = false;
  bool leaving_ = false;
  bool stopping_ = false;
  base::SteadyTime last_heard_;
  uint64_t next_request_ = 0;
  std::map<uint64_t, BarrierWait> barrier_waits_;
  std::vector<FailureListener> failure_listeners_;

  std::mutex barrier_mu_;
  std::map<int, uint64_t> barrier_sequence_;  // by mask; guarded by barrier_mu_

  std::thread heartbeat_;
};

}  // namespace tandem::cluster
