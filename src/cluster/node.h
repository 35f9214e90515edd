// A node: one process's membership in a job, assembled once from its
// start-up environment, a transport factory and a clock, and shared by the
// services the process runs on it (docs/architecture.md, "The node").
//
// Assembling reads the start-up contract and the configuration, makes the
// logger and the transport (TCP unless the assembly says otherwise, inside
// PS_RESEND's reliable layer when asked), listens, starts the scheduler
// service when this process is the scheduler and makes the membership
// client. Services (the parameter server's client or server, the
// collectives) are then set up on Services() and attached; only then does
// Join() register with the scheduler, so no peer learns this node's address
// before every service can take its messages.
//
// Users hold the node through Holds: a program's Cluster handle, each store
// and the collectives opened on it. The node leaves the job when its last
// hold is released, with the final barrier when that release asks for it;
// a node whose last hold goes without asking leaves at once, as a process
// that dies would.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/config.h"
#include "base/environment.h"
#include "base/logger.h"
#include "base/stats.h"
#include "base/timeline.h"
#include "cluster/dmlc_contract.h"
#include "cluster/membership.h"
#include "cluster/node_services.h"
#include "cluster/scheduler.h"
#include "cluster/startup_environment.h"
#include "net/message_dispatcher.h"
#include "net/metered_transport.h"
#include "net/send_queue_bound.h"
#include "net/transport.h"

namespace tandem::metrics {
class PrometheusEndpoint;
}  // namespace tandem::metrics

namespace tandem::net {
class ReliableTransport;
class TcpTransport;
}  // namespace tandem::net

namespace tandem::cluster {

/// Makes the transport a node talks through, delivering to `handler`. The
/// default makes a net::TcpTransport tuned from the environment; the
/// in-process test jobs make net::InProcTransports on one network.
using TransportFactory = std::function<std::unique_ptr<net::Transport>(
    const net::TransportOptions& options, net::TransportHandler* handler, base::Logger& log)>;

/// What a node is assembled from besides its environment.
struct NodeAssembly {
  /// Null: TCP, as a process of a real job.
  TransportFactory transport;
  /// Null: the node's own steady clock. Must outlive the node.
  const base::Clock* clock = nullptr;
  /// Listen at the announced host name itself (the scheduler's name, or
  /// DMLC_NODE_HOST) rather than at an address: for the in-process network,
  /// where any name is an address and there are no interfaces.
  bool listen_on_announced_host = false;
};

/// Thread-safety: Services(), Attach() and Join() belong to the thread that
/// assembles the node; Finalize() and the holds may be used from any thread
/// (one Finalize at a time); the membership and the services have their own
/// rules.
class Node {
 public:
  /// Assembles the node `env` describes (see the file comment): after this
  /// it listens but has not registered. Throws ConfigError (an unusable
  /// environment, a missing TANDEM_SECRET), IoError (cannot listen),
  /// Timeout (the scheduler's host does not resolve).
  explicit Node(const base::Environment& env, NodeAssembly assembly = {});
  /// Runs the attached services' stop hooks, leaves at once unless the node
  /// finalized, shuts the transport down, then releases the services.
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// What a service uses of this node; table() and self() of the membership
  /// are valid once Join() returned.
  NodeServices Services();
  /// Keeps `service` until the node goes. `stop` (may be empty) runs first
  /// in ~Node, while the transport still runs: it stops what would call into
  /// the transport (a service's worker threads, its communicators). The
  /// service itself is released after the transport stopped calling it.
  void Attach(std::shared_ptr<void> service, std::function<void()> stop = {});

  /// Registers with the scheduler and blocks until the node table came (see
  /// Membership::Join); then labels the metrics and the timeline with the
  /// role and rank.
  void Join();
  /// The orderly exit of tandem::Cluster::Finalize: the final barrier, then
  /// (the scheduler) waiting until every node left, then the hosted
  /// rendezvous' own. Throws PeerLost, Timeout, the stopping node's error.
  void Finalize();
  /// Whether Finalize() completed.
  bool finalized() const { return finalized_; }

  /// This node's role and, once joined, its entry and the job's table.
  Role role() const { return desc_.role; }
  Membership& membership() { return *membership_; }
  const Membership& membership() const { return *membership_; }
  /// The scheduler's port (the one a scheduler node listens at, chosen here
  /// when its contract said 0).
  uint16_t scheduler_port() const { return desc_.scheduler_port; }
  /// The logger, tagged "<role> <rank>" once joined.
  base::Logger& log() { return log_; }
  /// The transport every service of this node sends through.
  net::Transport& transport() { return *transport_; }
  /// The scheduler service, on the scheduler's node; null elsewhere.
  Scheduler* scheduler() { return scheduler_.get(); }

  /// One user's claim on a node: the node leaves the job when its last hold
  /// is released (see the file comment). Thread-safety: one thread.
  class Hold {
   public:
    /// Releases without the final barrier when Release was not called.
    ~Hold();
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    /// Gives up this claim. When it is the node's last one: `graceful`
    /// finalizes the node (and throws what Finalize throws), otherwise the
    /// node will leave at once when it goes. Idempotent.
    void Release(bool graceful);
    /// The node; valid while the hold lives.
    Node& node() const { return *node_; }
    /// Shares the node (keeps it alive without a claim of its own).
    const std::shared_ptr<Node>& shared() const { return node_; }

   private:
    friend class Node;
    explicit Hold(std::shared_ptr<Node> node) : node_(std::move(node)) {}
    std::shared_ptr<Node> node_;
    bool released_ = false;
  };
  /// A new claim on `node`.
  static std::unique_ptr<Hold> NewHold(const std::shared_ptr<Node>& node);

 private:
  // The scheduler node that worker 0 hosts (`hosted`).
  Node(const base::Environment& env, NodeAssembly assembly, bool hosted);
  struct Attached {
    std::shared_ptr<void> service;
    std::function<void()> stop;
  };
  void BuildTransport(const NodeAssembly& assembly);
  void MakeMembership(bool listen_on_announced_host);
  void StartObservability();
  void AddClusterMetrics();
  void StartRendezvous(const NodeAssembly& assembly);
  const char* RoleLabel(int id) const;

  base::Environment env_;
  base::Config config_;
  ProcessDescription desc_;
  base::Logger log_;
  base::SteadyClock own_clock_;
  const base::Clock& clock_;
  net::MessageDispatcher dispatcher_;
  base::StatsRegistry stats_;
  std::unique_ptr<base::Timeline> timeline_;  // TANDEM_TIMELINE, else null
  std::unique_ptr<net::TrafficMeter> meter_;
  std::unique_ptr<net::SendQueueMeter> send_queue_meter_;
  // Owns the real transport; counts traffic (docs/metrics.md).
  std::unique_ptr<net::MeteredTransport> transport_;
  net::ReliableTransport* reliable_ = nullptr;  // inside transport_ with PS_RESEND=1
  net::TcpTransport* tcp_ = nullptr;            // inside transport_, when TCP
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<Membership> membership_;
  std::vector<Attached> attached_;
  std::atomic<bool> finalized_{false};
  // Set by membership's failure listener (on whichever thread learnt it),
  // read by the destructor.
  std::atomic<bool> job_failed_{false};
  // Collectives-only jobs (TANDEM_RENDEZVOUS_IN_PROCESS=1): worker 0 runs
  // the scheduler node too, with its own transport, on `rendezvous_thread_`
  // (docs/collectives.md, "Jobs without a scheduler process").
  std::unique_ptr<Node> rendezvous_;
  std::thread rendezvous_thread_;
  std::exception_ptr rendezvous_error_;  // written by rendezvous_thread_ before it ends
  // True for the scheduler node that worker 0 hosts (it logs less).
  bool hosted_ = false;
  std::mutex holds_mu_;
  int holds_ = 0;  // guarded by holds_mu_
  // Last: destroyed first, so no scrape reads what is gone.
  std::unique_ptr<metrics::PrometheusEndpoint> endpoint_;
};

/// Assembles the node `env` describes with the default assembly, runs
/// `setup` on its services (may be empty), joins, and returns it.
std::shared_ptr<Node> JoinNode(const base::Environment& env, const ServiceSetup& setup);

}  // namespace tandem::cluster
