// A node's side of the membership protocol (docs/protocol-cluster.md):
// register with the scheduler, receive the node table, barriers, heartbeats,
// and the news that a node was lost.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/logger.h"
#include "base/wait_report.h"
#include "cluster/cluster_messages.h"
#include "net/transport.h"

namespace tandem::cluster {

/// Thread-safety: transport callbacks and the heartbeat thread update the
/// state under `mu_`; public methods may be called from any thread, and
/// Barrier calls are serialised by `barrier_mu_`. Nothing is sent while
/// `mu_` is held.
///
/// Time: heartbeats, the wait for the node table and barrier waits (and
/// their time-outs) run on the clock given to the constructor
/// (base/clock.h), so tests drive them with a ManualClock.
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
    /// How often a wait for the node table or a barrier logs that it goes on.
    std::chrono::milliseconds wait_report_interval = base::kDefaultWaitReportInterval;
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

  /// See tandem::Cluster::Barrier. `final` marks Finalize()'s barrier;
  /// `admit` a regroup of the workers, at whose release the scheduler
  /// admits workers waiting to join an elastic job (docs/elastic.md,
  /// "Workers that join").
  Members Barrier(int groups, bool final = false, bool admit = false);

  /// Throws the job's failure (PeerLost, ...) if there is one.
  void CheckHealth() const;

  /// The membership's epoch: 0 until a worker leaves an elastic job, then
  /// +1 for each that left (docs/elastic.md). Any thread.
  uint32_t epoch() const;
  /// The ranks of the workers that are members now (every worker's until
  /// one leaves an elastic job), ascending. Valid after Join(); any thread.
  std::vector<int> workers() const;
  /// How many workers are members now. Valid after Join(); any thread.
  int num_workers() const;

  /// Called with each change of an elastic job's membership (a worker that
  /// left; the notice carries the new epoch and the workers that remain),
  /// in epoch order. Runs on the transport's thread while Membership holds
  /// its lock, as a FailureListener does: quick, and no calls back into
  /// Membership. Listeners added after a change are not told of it (they
  /// read workers()).
  using WorkerLeftListener = std::function<void(const WorkerLeftNotice& notice)>;
  void AddWorkerLeftListener(WorkerLeftListener listener);

  /// Called with each worker admitted into the running elastic job (it
  /// takes a departed worker's place: the same node id and rank, its own
  /// address), in epoch order, as the WorkerLeftListener is.
  using WorkerJoinedListener = std::function<void(const WorkerJoinedNotice& notice)>;
  void AddWorkerJoinedListener(WorkerJoinedListener listener);

  /// How many workers wait to be admitted at the workers' next regroup, as
  /// the scheduler last said (0 when none, or on a node that is not a
  /// worker). Any thread.
  uint32_t joiners_waiting() const;
  /// Whether this node was admitted into a job already running (it took a
  /// departed worker's place) rather than forming it. Valid after Join().
  bool joined_running_job() const { return admission_epoch_ > 0; }
  /// The membership epoch at which this node was admitted (0 when it
  /// formed the job with the others). Valid after Join().
  uint32_t admission_epoch() const { return admission_epoch_; }
  /// The members admitted before this node since the job went below its
  /// minimum (Admission::joined_below_minimum); empty when it formed the
  /// job. Valid after Join().
  const std::vector<int>& joined_below_minimum() const { return joined_below_minimum_; }
  /// Worker `rank`'s entry: the table's, or the address of the worker that
  /// took its place since. Valid after Join(); any thread.
  NodeInfo worker(int rank) const;

  /// The job's failure once known, waiting up to `within` for it; null when
  /// none came. A service whose peer closed its connection asks this before
  /// it reports the peer: the peer may have left because of a failure this
  /// node is about to learn (a server that saw a worker's heartbeats stop
  /// exits at once), and the report should name that cause, not the peer
  /// that left because of it. Any thread; never with a lock a failure
  /// listener takes.
  std::exception_ptr AwaitFailure(std::chrono::milliseconds within);

  /// The time since this node last heard from the scheduler (any message;
  /// heartbeat replies keep it short). Any thread.
  std::chrono::milliseconds SinceLastHeard() const;

  /// Barrier over all nodes, then tells the scheduler this node leaves.
  void Finalize();

  /// Closes the connection without ceremony (a process going away).
  void Close();

  /// Asks the scheduler to stop the whole job because of `cause` (a server
  /// that cannot go on as its workers asked: docs/protocol-cluster.md,
  /// "Stopping the job"). Every node, this one included, then fails with
  /// the exception kind of `cause` (StopKindOf) and a text naming this node
  /// and the cause. Returns at once; does nothing after the job failed.
  /// Any thread.
  void StopJob(const std::exception& cause);

  /// Called once with the job's failure (a lost node, the lost scheduler, a
  /// start time-out, a stopped job) when it is first learnt; at once if the
  /// failure is already known. `text` says what happened; `error` is the
  /// exception every call fails with from now on (PeerLost for a lost node,
  /// the stopping node's kind for a stopped job). Runs on the thread that
  /// learnt it (usually the transport's) while Membership holds its lock:
  /// it must be quick and must not call back into Membership. Services use
  /// it to fail their pending operations instead of waiting.
  using FailureListener =
      std::function<void(const std::string& text, const std::exception_ptr& error)>;
  void AddFailureListener(FailureListener listener);

 private:
  enum class FailureKind { kPeerLost, kRejected, kTimeout, kStopped };
  struct BarrierWait {
    bool done = false;
    bool timed_out = false;
    std::optional<std::string> error;
    Members members;  // at the release (kBarrierDone)
  };

  void OnMessage(net::ConnectionId id, net::Message&& msg) override;
  void OnDisconnected(net::ConnectionId id, const std::string& reason) override;
  // Requires mu_; `stop_kind` matters for kStopped only.
  void Fail(FailureKind kind, std::string text, StopKind stop_kind = StopKind::kError);
  std::exception_ptr FailureError() const;  // requires mu_ and a failure
  [[noreturn]] void ThrowFailure() const;   // requires mu_
  // Beats every heartbeat_interval on clock_, the first at `first`, and
  // fails the job when the scheduler stayed silent past heartbeat_timeout.
  void HeartbeatLoop(base::SteadyTime first);
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
  StopKind stop_kind_ = StopKind::kError;  // of a kStopped failure_
  bool connected_ = false;
  bool leaving_ = false;
  bool stopping_ = false;
  base::SteadyTime last_heard_;
  uint64_t next_request_ = 0;
  std::map<uint64_t, BarrierWait> barrier_waits_;
  std::vector<FailureListener> failure_listeners_;
  uint32_t epoch_ = 0;
  std::vector<int> workers_;  // members now; set with the table
  std::vector<WorkerLeftListener> worker_left_listeners_;
  std::vector<WorkerJoinedListener> worker_joined_listeners_;
  std::map<int, NodeInfo> joined_;  // by rank: workers that took a place since the table
  uint32_t joiners_waiting_ = 0;
  std::optional<std::string> queued_;  // why the scheduler holds this joiner back
  // The admission's barrier counts (kAdmitted), applied by Join().
  std::vector<std::pair<uint8_t, uint64_t>> admitted_barriers_;
  uint32_t admission_epoch_ = 0;           // written before Join() returns; 0: formed the job
  std::vector<int> joined_below_minimum_;  // written before Join() returns

  std::mutex barrier_mu_;
  std::map<int, uint64_t> barrier_sequence_;  // by mask; guarded by barrier_mu_

  std::thread heartbeat_;
};

}  // namespace tandem::cluster
