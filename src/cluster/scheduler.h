// The scheduler service: rendezvous, rank assignment, barriers, heartbeats
// and failure detection for one job (docs/protocol-cluster.md).
//
// It runs inside the scheduler process beside that process's own
// membership client, which registers with it like every other node.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/logger.h"
#include "base/wait_report.h"
#include "cluster/cluster_messages.h"
#include "net/transport.h"

namespace tandem::cluster {

/// Thread-safety: callbacks arrive on the transport's thread and the
/// watchdog runs on its own; both take `mu_`. Nothing is sent or closed
/// while `mu_` is held (a transport may call back synchronously), so every
/// handler collects its sends in an Outbox and flushes it after unlocking.
/// Public methods may be called from any thread.
///
/// Time: the watchdog's start, heartbeat and barrier time-outs run on the
/// clock given to the constructor (base/clock.h), so tests drive them with
/// a ManualClock; WaitUntilAllLeft and DrainConnections are a process's
/// grace periods before it exits and wait in real time.
class Scheduler final : public net::TransportHandler {
 public:
  struct Options {
    int num_servers = 0;
    int num_workers = 1;
    std::chrono::milliseconds heartbeat_timeout{10000};
    std::chrono::milliseconds start_timeout{300000};
    std::chrono::milliseconds barrier_timeout{600000};
    /// Elastic: with 1 <= min_workers < num_workers, a lost worker leaves
    /// the job (kWorkerLeft to every other node, a new membership epoch)
    /// while at least min_workers remain, instead of failing it
    /// (TANDEM_MIN_WORKERS, docs/elastic.md). 0: every loss fails the job.
    int min_workers = 0;
    /// Elastic, without servers: how long the job waits with fewer than
    /// min_workers workers (at least one) for workers to join before it
    /// fails (TANDEM_ELASTIC_TIMEOUT, horovodrun's --elastic-timeout);
    /// meanwhile the workers' regroups wait. 0: a loss below min_workers
    /// fails the job at once, as it always does with servers.
    std::chrono::milliseconds elastic_timeout{600000};
    /// How often the wait for every node to register logs who is missing.
    std::chrono::milliseconds wait_report_interval = base::kDefaultWaitReportInterval;
  };

  /// `transport` must already listen; the scheduler receives its callbacks
  /// through a dispatcher (types msg::kRegister..msg::kSchedulerBoundLast)
  /// and OnDisconnected. Starts the watchdog thread.
  Scheduler(Options options, net::Transport& transport, const base::Logger& log,
            const base::Clock& clock);
  /// Stops the watchdog. The transport must be shut down first or outlive
  /// no callbacks into this object.
  ~Scheduler() override;

  /// Blocks until every node has left after its final barrier (true) or the
  /// job failed or `timeout` (real time) passed (false).
  bool WaitUntilAllLeft(std::chrono::milliseconds timeout);

  /// The reason the job failed (a lost node, a start timeout), if it did.
  std::optional<std::string> failure() const;

  /// Blocks until every connection has closed or `timeout` (real time)
  /// passed: lets the notices of a failure reach every node before the
  /// process exits.
  void DrainConnections(std::chrono::milliseconds timeout);

  /// For each node of the formed job that has not left: its id and the time
  /// since its last message (heartbeat or other). Empty before the job
  /// formed. Any thread.
  std::vector<std::pair<int, std::chrono::milliseconds>> Silences() const;

  /// The membership's epoch: how many workers have left or joined the
  /// elastic job.
  /// Any thread.
  uint32_t epoch() const;

  /// How many nodes have registered so far (every node once the job formed).
  /// Any thread; for tests and monitoring.
  size_t Registered() const;
  /// How many nodes wait now at the barrier over the group mask `groups`
  /// (0 when none is open). Any thread; for tests and monitoring.
  size_t AtBarrier(int groups) const;
  /// How many workers wait for a place in the running job. Any thread.
  size_t Joiners() const;
  /// Whether the elastic job has fewer members than its minimum and waits
  /// for workers to join (Options::elastic_timeout). Any thread; for tests
  /// and monitoring.
  bool BelowMinimum() const;

  void OnConnected(net::ConnectionId id, const net::PeerInfo& peer) override;
  void OnMessage(net::ConnectionId id, net::Message&& msg) override;
  void OnDisconnected(net::ConnectionId id, const std::string& reason) override;

 private:
  struct Outbox {
    std::vector<std::pair<net::ConnectionId, net::OutgoingMessage>> sends;
    std::vector<net::ConnectionId> closes;
  };
  struct Pending {
    net::ConnectionId conn;
    RegisterRequest request;
  };
  struct NodeState {
    net::ConnectionId conn = 0;
    base::SteadyTime last_seen;
    bool left = false;      // finished, or gone (lost, or left an elastic job)
    bool departed = false;  // a worker that left an elastic job: no longer a member
  };
  // A worker that registered after the job formed, waiting for a place
  // (docs/elastic.md, "Workers that join").
  struct Joiner {
    net::ConnectionId conn;
    RegisterRequest request;
    base::SteadyTime since;
  };
  struct BarrierState {
    uint64_t sequence = 0;
    bool final = false;
    bool admit = true;  // every arrival asked for admissions (BarrierRequest::kAdmit)
    base::SteadyTime started;
    std::map<int, uint64_t> arrived;  // node id -> request id
  };

  void HandleRegister(net::ConnectionId conn, const net::Message& msg, Outbox& out);
  void HandleBarrier(int node, const net::Message& msg, Outbox& out);
  void FormJob(Outbox& out);
  void FailJob(const std::string& reason, Outbox& out);
  // kStopJob from `node`: tells every node the job stopped, and why.
  void StopJob(int node, const JobStopRequest& request, Outbox& out);  // requires mu_
  void DeclareLost(int node, const std::string& reason, Outbox& out);
  // An elastic job goes on without worker `node`: a new epoch, kWorkerLeft
  // to every remaining node, and the open barriers completed without it.
  void DepartWorker(int node, const std::string& reason, Outbox& out);  // requires mu_
  bool Elastic() const;
  // Whether a loss that leaves fewer than min_workers (but some) workers
  // waits for joiners rather than failing the job: elastic, no servers (the
  // servers' rounds take no new worker) and elastic_timeout above 0.
  bool WaitsBelowMinimum() const;
  // Whether the open barrier over `groups` can be released: every member
  // arrived, and it is not a regroup held while the job is below its
  // minimum and no joiner can be admitted yet.
  bool BarrierReady(int groups, const BarrierState& b) const;  // requires mu_
  // Releases every open barrier that became ready (a member left, a
  // joiner became admissible).
  void CompleteReadyBarriers(Outbox& out);  // requires mu_
  // The job has stayed below its minimum for elastic_timeout: tells every
  // node and joiner why it fails.
  void FailBelowMinimum(Outbox& out);  // requires mu_
  void Reject(net::ConnectionId conn, const std::string& reason, Outbox& out);
  void FinishBarrier(BarrierState& b, uint16_t type, bool timed_out, const std::string& text,
                     Outbox& out);
  // Releases the open barrier over `groups` (every member arrived): records
  // how many barriers the mask passed, admits the waiting workers when it
  // is a regroup of the workers, then answers every arrival.
  void CompleteBarrier(int groups, Outbox& out);  // requires mu_
  // A worker registering after the job formed: queued for a place in an
  // elastic job, refused otherwise.
  void QueueJoiner(net::ConnectionId conn, RegisterRequest request, const std::string& who,
                   Outbox& out);  // requires mu_
  // The worker rank each admissible joiner would take now, by index into
  // joiners_ (-1: none free for it). Requested ranks first, then the
  // lowest free ranks in the order the joiners came.
  std::vector<int> PlaceJoiners() const;  // requires mu_ and the table
  // Gives the admissible joiners their places: a new epoch each, a
  // kWorkerJoined notice to every other node, kAdmitted to the joiner.
  void AdmitJoiners(Outbox& out);  // requires mu_
  // Tells the member workers how many joiners wait for a place, when that
  // count changed.
  void AnnounceJoiners(Outbox& out);  // requires mu_
  int WorkerNode(int rank) const;     // node id of worker `rank`; requires the table
  // The ids of the nodes of `groups` that are members (not departed).
  std::vector<int> MembersOf(int groups) const;
  int RemainingWorkers() const;  // requires mu_ and the table
  std::string MissingFromStart() const;
  void WatchdogLoop();
  void Flush(Outbox& out);
  net::OutgoingMessage MakeMessage(uint16_t type, int recipient, std::string meta,
                                   uint64_t request_id = 0, uint32_t flags = 0) const;

  const Options options_;
  net::Transport& transport_;
  const base::Logger& log_;
  const base::Clock& clock_;
  const base::SteadyTime start_;
  base::WaitReport start_report_;  // the wait for registrations; watchdog thread only

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::set<net::ConnectionId> open_connections_;
  std::vector<Pending> pending_;    // before the job formed
  std::optional<NodeTable> table_;  // once formed
  std::vector<NodeState> states_;   // by node id, once formed
  std::map<net::ConnectionId, int> node_of_conn_;
  std::map<int, BarrierState> barriers_;  // by group mask
  std::map<int, uint64_t> passed_;        // by group mask: the last barrier released
  std::vector<Joiner> joiners_;           // waiting for a place, in arrival order
  uint32_t announced_joiners_ = 0;        // the count the workers were last told
  std::optional<std::string> failure_;
  int left_count_ = 0;
  int departed_count_ = 0;
  uint32_t epoch_ = 0;  // membership changes so far
  // While fewer than min_workers remain (WaitsBelowMinimum): since when,
  // and the loss that took the job below it (the node as it was, and why).
  std::optional<base::SteadyTime> below_minimum_since_;
  std::optional<std::pair<NodeInfo, std::string>> below_minimum_loss_;
  // The workers admitted while below the minimum, ascending
  // (Admission::joined_below_minimum).
  std::vector<int32_t> joined_below_minimum_;

  std::thread watchdog_;  // last: starts after everything above exists
};

}  // namespace tandem::cluster
