// tandem::Cluster: wires a process's objects together from its environment
// (config, logger, transport, the scheduler service when this process is
// the scheduler, the membership client) and exposes the public API.
#include "tandem/cluster.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <thread>

#include "base/clock.h"
#include "base/config.h"
#include "base/environment.h"
#include "base/exit_code.h"
#include "base/logger.h"
#include "base/stats.h"
#include "base/timeline.h"
#include "cluster/dmlc_contract.h"
#include "cluster/job_secret_requirement.h"
#include "cluster/membership.h"
#include "cluster/node_address.h"
#include "cluster/node_services.h"
#include "cluster/scheduler.h"
#include "cluster/startup_environment.h"
#include "metrics/prometheus_endpoint.h"
#include "net/message_dispatcher.h"
#include "net/metered_transport.h"
#include "net/reliable_transport.h"
#include "net/send_queue_bound.h"
#include "net/tcp_transport.h"
#include "tandem/error.h"

namespace tandem {

struct Cluster::Impl {
  base::Environment env;
  base::Config config;
  cluster::ProcessDescription desc;
  base::Logger log;
  base::SteadyClock clock;
  net::MessageDispatcher dispatcher;
  base::StatsRegistry stats;
  std::unique_ptr<base::Timeline> timeline;  // TANDEM_TIMELINE, else null
  std::unique_ptr<net::TrafficMeter> meter;
  std::unique_ptr<net::SendQueueMeter> send_queue_meter;
  // Owns the real transport; counts traffic (docs/metrics.md).
  std::unique_ptr<net::MeteredTransport> transport;
  net::ReliableTransport* reliable = nullptr;  // inside `transport` with PS_RESEND=1
  net::TcpTransport* tcp = nullptr;            // inside `transport`, unless in-process
  std::unique_ptr<cluster::Scheduler> scheduler;
  std::unique_ptr<cluster::Membership> membership;
  bool finalized = false;
  // Set by membership's failure listener (on whichever thread learnt it),
  // read by the destructor.
  std::atomic<bool> job_failed{false};
  // Collectives-only jobs (TANDEM_RENDEZVOUS_IN_PROCESS=1): worker 0 runs
  // the scheduler node too, with its own transport, on `rendezvous_thread`
  // (docs/collectives.md, "Jobs without a scheduler process").
  std::unique_ptr<Impl> rendezvous;
  std::thread rendezvous_thread;
  std::exception_ptr rendezvous_error;  // written by rendezvous_thread before it ends
  // Last: destroyed first, so no scrape reads what is gone.
  std::unique_ptr<metrics::PrometheusEndpoint> endpoint;

  // True for the scheduler node that worker 0 hosts (it logs less).
  bool hosted = false;

  explicit Impl(const base::Environment& e)
      : env(cluster::ResolveStartupEnvironment(e)),
        config(base::Config::FromEnvironment(env)),
        desc(ParseContract(env)),
        log(std::string(RoleName(desc.role)), config.verbose, 2, config.quiet) {}

  // `env` is resolved already (startup_environment.h): it carries the
  // DMLC variables whatever contract the process was started under.
  static cluster::ProcessDescription ParseContract(const base::Environment& env) {
    cluster::ProcessDescription d = cluster::ParseDmlcContract(env);
    d.contract = env.GetString(cluster::kResolvedContractVariable, "dmlc");
    return d;
  }

  void Start(const cluster::ServiceSetup& setup, bool join = true) {
    // Worker 0's hosted scheduler node shares its environment: checked once.
    if (!hosted) cluster::RequireJobSecret(config, desc.contract, log);
    if (desc.role == Role::kWorker && desc.requested_rank == 0 &&
        env.GetBool("TANDEM_RENDEZVOUS_IN_PROCESS", false)) {
      StartRendezvous();
    }
    if (!hosted) log.Info("start-up contract: {}", desc.contract);
    net::TransportOptions topts;
    topts.job_id = config.job_id;
    topts.secret = config.secret;
    topts.limits.max_meta_bytes = config.max_meta_bytes;
    topts.limits.max_payload_bytes = config.max_payload_bytes;
    topts.handshake_timeout = config.handshake_timeout;
    topts.max_unauthenticated = static_cast<size_t>(config.max_unauthenticated);
    topts.wait_report_interval = config.wait_report_interval;
    // TANDEM_TLS=1: the files are checked here, so a bad one stops this
    // process with its name rather than failing connections elsewhere.
    if (config.tls)
      topts.tls = net::TlsContext::Load({config.tls_cert, config.tls_key, config.tls_ca});
    // TANDEM_MAX_INFLIGHT_BYTES bounds each connection's send queue
    // (docs/transport.md, "Back-pressure").
    // and TANDEM_TCP_RTO_MIN_MS the floor of the retransmission time-out.
    net::TcpTuning tuning = net::TcpTuning::FromEnvironment(env);
    auto make_tcp = [&](net::TransportHandler* handler) -> std::unique_ptr<net::Transport> {
      auto t = std::make_unique<net::TcpTransport>(topts, handler, log, tuning);
      tcp = t.get();
      return t;
    };
    StartObservability();
    meter = std::make_unique<net::TrafficMeter>(stats, [this](int id) { return RoleLabel(id); });
    send_queue_meter =
        std::make_unique<net::SendQueueMeter>(stats, [this](int id) { return RoleLabel(id); });
    tuning.send_queue.meter = send_queue_meter.get();
    transport = std::make_unique<net::MeteredTransport>(*meter, &dispatcher);
    if (config.resend) {
      // PS_RESEND=1: every message of this process, cluster ones included,
      // goes through acks and resend (docs/protocol-resend.md).
      auto r = std::make_unique<net::ReliableTransport>(net::ReliableOptions::FromConfig(config),
                                                        transport.get(), log, make_tcp);
      reliable = r.get();
      transport->SetInner(std::move(r));
    } else {
      transport->SetInner(make_tcp(transport.get()));
    }
    dispatcher.SetTransport(transport.get());

    cluster::Membership::Options m;
    m.role = desc.role;
    m.requested_rank = desc.requested_rank;
    m.connect_timeout = config.connect_timeout;
    m.start_timeout = config.start_timeout;
    m.barrier_timeout = config.barrier_timeout;
    m.heartbeat_interval = config.heartbeat_interval;
    m.heartbeat_timeout = config.heartbeat_timeout;
    m.wait_report_interval = config.wait_report_interval;
    if (desc.role == Role::kScheduler) {
      // A name (a Kubernetes Service, say) may not be an address of this
      // host, so bind every interface then; MXJob asks for that explicitly.
      bool bind_all = desc.use_kubernetes || !cluster::IsIpLiteral(desc.scheduler_host);
      std::string bind_host = bind_all ? "0.0.0.0" : desc.scheduler_host;
      cluster::Scheduler::Options s;
      s.num_servers = desc.num_servers;
      s.num_workers = desc.num_workers;
      s.heartbeat_timeout = config.heartbeat_timeout;
      s.start_timeout = config.start_timeout;
      s.wait_report_interval = config.wait_report_interval;
      s.barrier_timeout = config.barrier_timeout;
      scheduler = std::make_unique<cluster::Scheduler>(s, *transport, log, clock);
      dispatcher.Register(cluster::msg::kRegister, cluster::msg::kSchedulerBoundLast,
                          scheduler.get());
      // Only now: a node may register the moment the port is open.
      auto bound = transport->Listen({bind_host, desc.scheduler_port});
      if (desc.scheduler_port == 0) desc.scheduler_port = bound.port;  // a process alone
      log.Info("scheduler listening on {}:{} for {} servers and {} workers", bind_host,
               desc.scheduler_port, desc.num_servers, desc.num_workers);
      m.scheduler = {bind_all ? "127.0.0.1" : desc.scheduler_host, desc.scheduler_port};
      m.host = desc.scheduler_host;
      m.port = desc.scheduler_port;
    } else {
      m.scheduler = {desc.scheduler_host, desc.scheduler_port};
      try {
        m.host = cluster::SelectNodeHost(desc, config.connect_timeout, log);
      } catch (const Timeout& e) {
        throw Timeout(fmt::format(
            "waited {} ms (TANDEM_CONNECT_TIMEOUT) for the scheduler's host '{}' (start-up "
            "contract {}) to resolve, to learn this node's address: {}",
            config.connect_timeout.count(), desc.scheduler_host, desc.contract, e.what()));
      }
      std::string bind_host = cluster::IsIpLiteral(m.host) ? m.host : "0.0.0.0";
      m.port = transport->Listen({bind_host, 0}).port;
    }
    membership = std::make_unique<cluster::Membership>(m, *transport, log, clock);
    membership->AddFailureListener([this](const std::string&, const std::exception_ptr&) {
      job_failed = true;
      // A node stops resending to peers that no longer answer, so that its
      // blocked calls return and it exits now (docs/protocol-resend.md,
      // "After a failure"). The scheduler process first lets its lost-node
      // notices reach the others (the destructor).
      if (reliable && !scheduler) reliable->AbandonUnacknowledged();
    });
    dispatcher.Register(cluster::msg::kNodeBoundFirst, cluster::msg::kNodeBoundLast,
                        membership.get());
    AddClusterMetrics();
    if (setup) {
      cluster::NodeServices services = Services();
      setup(services);
    }
    if (join) {
      membership->Join();
      const NodeInfo& self = membership->self();
      stats.SetConstantLabels({{"role", std::string(RoleName(self.role))},
                               {"rank", std::to_string(std::max(self.rank, 0))}});
      if (timeline) {
        timeline->SetProcessName(self.role == Role::kScheduler
                                     ? std::string("scheduler")
                                     : fmt::format("{} {}", RoleName(self.role), self.rank));
      }
    }
  }

  // The role label of node `id` ("0 is the scheduler, then servers, then
  // workers": tandem/cluster.h), for the traffic counters.
  const char* RoleLabel(int id) const {
    if (id == 0) return "scheduler";
    if (id <= desc.num_servers) return "server";
    if (id <= desc.num_servers + desc.num_workers) return "worker";
    return "unknown";
  }

  // TANDEM_METRICS_PORT and TANDEM_TIMELINE (docs/metrics.md); not for the
  // scheduler node that worker 0 hosts, which is part of worker 0's process.
  void StartObservability() {
    if (hosted) return;
    stats.SetConstantLabels({{"role", std::string(RoleName(desc.role))}});
    if (auto path = env.Get("TANDEM_TIMELINE"); path && !path->empty()) {
      std::string file = fmt::format("{}.{}", *path, ::getpid());
      timeline = std::make_unique<base::Timeline>(file, static_cast<int>(::getpid()),
                                                  std::string(RoleName(desc.role)));
      log.Info("writing the communication timeline to {}", file);
    }
    if (auto port = env.Get("TANDEM_METRICS_PORT"); port && !port->empty()) {
      const auto first = static_cast<uint16_t>(env.GetInt("TANDEM_METRICS_PORT", 0, 0, 65535));
      // Loopback unless asked: the counters name peers and ports, and a
      // scraper in another pod or host needs TANDEM_METRICS_ADDRESS=0.0.0.0.
      const std::string address = env.GetString("TANDEM_METRICS_ADDRESS", "127.0.0.1");
      // Several processes on one host: each takes the next free port of
      // first..first+63.
      const int tries = first == 0 ? 1 : std::min(64, 65536 - first);
      for (int i = 0; i < tries && !endpoint; ++i) {
        try {
          endpoint = std::make_unique<metrics::PrometheusEndpoint>(
              stats, address, static_cast<uint16_t>(first + i));
        } catch (const IoError& e) {
          if (i + 1 == tries) {
            throw IoError(fmt::format("TANDEM_METRICS_PORT={}: no free port in {}..{} on {}: {}",
                                      first, first, first + tries - 1, address, e.what()));
          }
        }
      }
      log.Info("serving metrics at http://{}:{}/metrics", address, endpoint->port());
    }
  }

  // Values read when scraped: heartbeat ages and the reliable layer's
  // counters.
  void AddClusterMetrics() {
    if (hosted) return;
    static constexpr const char* kAgeHelp =
        "Seconds since this node last heard from the peer (heartbeats keep it near "
        "PS_HEARTBEAT_INTERVAL).";
    auto& age = stats.GetGauge("tandem_heartbeat_age_seconds", kAgeHelp,
                               {{"peer_role", "scheduler"}, {"peer_rank", "0"}});
    cluster::Membership* mem = membership.get();
    stats.AddRefresher([mem, &age] { age.Set(mem->SinceLastHeard().count() / 1e3); });
    if (scheduler) {
      cluster::Scheduler* sched = scheduler.get();
      base::StatsRegistry* reg = &stats;
      stats.AddRefresher([this, sched, reg] {
        for (const auto& [id, silence] : sched->Silences()) {
          const char* role = RoleLabel(id);
          int rank = std::string_view(role) == "server" ? id - 1 : id - 1 - desc.num_servers;
          reg->GetGauge("tandem_heartbeat_age_seconds", kAgeHelp,
                        {{"peer_role", role}, {"peer_rank", std::to_string(rank)}})
              .Set(silence.count() / 1e3);
        }
      });
    }
    if (tcp) {
      net::TcpTransport* t = tcp;
      auto& now = stats.GetGauge("tandem_unauthenticated_connections",
                                 "Accepted connections that have not finished the handshake.");
      auto& dropped = stats.GetCounter(
          "tandem_unauthenticated_dropped_total",
          "Connections dropped before they authenticated: refused, timed out, or the oldest "
          "past TANDEM_MAX_UNAUTHENTICATED.");
      stats.AddRefresher([t, &now, &dropped] {
        const net::UnauthenticatedStats st = t->Unauthenticated();
        now.Set(static_cast<double>(st.now));
        if (st.dropped > dropped.value()) dropped.Add(st.dropped - dropped.value());
      });
    }
    if (reliable) {
      net::ReliableTransport* rel = reliable;
      auto& resent = stats.GetCounter("tandem_retransmits_total",
                                      "Messages sent again after no acknowledgement (PS_RESEND).");
      auto& dups = stats.GetCounter("tandem_duplicates_received_total",
                                    "Copies of already delivered messages dropped (PS_RESEND).");
      auto& unacked = stats.GetGauge("tandem_unacknowledged_messages",
                                     "Messages sent and not yet acknowledged (PS_RESEND).");
      auto& waiting = stats.GetGauge("tandem_send_window_waiting_messages",
                                     "Messages queued behind a full resend window (PS_RESEND).");
      stats.AddRefresher([rel, &resent, &dups, &unacked, &waiting] {
        net::ReliableStats st = rel->Stats();
        // Mirrors of monotonic counters: add what is new (Refresh runs
        // one at a time).
        if (st.resent > resent.value()) resent.Add(st.resent - resent.value());
        if (st.duplicates > dups.value()) dups.Add(st.duplicates - dups.value());
        unacked.Set(static_cast<double>(st.unacked_now));
        waiting.Set(static_cast<double>(st.waiting_now));
      });
    }
    if (timeline) {
      base::Timeline* tl = timeline.get();
      membership->AddFailureListener(
          [tl, this](const std::string& text, const std::exception_ptr&) {
            tl->Instant("cluster", "job failed: " + text, clock.Now());
          });
    }
  }

  // The scheduler node of a collectives-only job, hosted by worker 0: it
  // listens at the scheduler address before this worker registers, then
  // joins and finalizes on its own thread, as a scheduler process would.
  void StartRendezvous() {
    auto vars = env.vars();
    vars["DMLC_ROLE"] = "scheduler";
    vars.erase("DMLC_WORKER_ID");
    vars.erase("TANDEM_RENDEZVOUS_IN_PROCESS");
    rendezvous = std::make_unique<Impl>(base::Environment(vars));
    rendezvous->hosted = true;
    rendezvous->Start(nullptr, /*join=*/false);
    desc.scheduler_port = rendezvous->desc.scheduler_port;  // chosen there when it was 0
    log.Info("worker 0 hosts the rendezvous in-process at {}:{}", desc.scheduler_host,
             desc.scheduler_port);
    rendezvous_thread = std::thread([this] {
      try {
        rendezvous->membership->Join();
        rendezvous->Finalize();
      } catch (...) {
        rendezvous_error = std::current_exception();
      }
    });
  }

  // Cluster::Finalize for this node (and for the hosted rendezvous).
  void Finalize() {
    membership->Finalize();
    finalized = true;
    if (scheduler) {
      auto limit = config.heartbeat_timeout + std::chrono::seconds(10);
      if (!scheduler->WaitUntilAllLeft(limit)) {
        if (auto failure = scheduler->failure()) throw PeerLost(*failure);
        throw Timeout(
            fmt::format("not every node left within {} ms after the final barrier", limit.count()));
      }
      log.Info("every node left; the job is complete");
    }
    if (rendezvous_thread.joinable()) {
      rendezvous_thread.join();
      if (rendezvous_error) std::rethrow_exception(rendezvous_error);
    }
  }

  cluster::NodeServices Services() {
    return {env,        config,      log,   clock,          *transport,
            dispatcher, *membership, stats, timeline.get(), meter.get()};
  }

  ~Impl() {
    if (rendezvous_thread.joinable()) {
      // This worker leaves without finalizing: stop the hosted scheduler,
      // which wakes its thread with the loss of its connections.
      if (membership && !finalized) membership->Close();
      if (rendezvous->transport) rendezvous->transport->Shutdown();
      rendezvous_thread.join();
    }
    if (membership && !finalized) membership->Close();
    if (scheduler && scheduler->failure()) {
      // Let the lost-node notices reach every node before this process goes.
      scheduler->DrainConnections(std::chrono::seconds(3));
    }
    // After a failure, what is still unacknowledged is bound for lost or
    // cut-off peers: exit now instead of lingering for the retry budget.
    if (reliable && (job_failed || (scheduler && scheduler->failure()))) {
      reliable->AbandonUnacknowledged();
    }
    if (transport) transport->Shutdown();
  }
};

Cluster::Cluster(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Cluster::~Cluster() = default;

std::unique_ptr<Cluster> Cluster::Join() { return Join(base::Environment::FromProcess().vars()); }

std::unique_ptr<Cluster> Cluster::Join(const std::map<std::string, std::string>& env) {
  return cluster::JoinWithServices(env, nullptr);
}

namespace cluster {

struct ClusterAccess {
  static std::unique_ptr<Cluster> Join(const std::map<std::string, std::string>& env,
                                       const ServiceSetup& setup) {
    auto impl = std::make_unique<Cluster::Impl>(base::Environment(env));
    impl->Start(setup);
    return std::unique_ptr<Cluster>(new Cluster(std::move(impl)));
  }
  static NodeServices Services(Cluster& c) { return c.impl_->Services(); }
};

std::unique_ptr<Cluster> JoinWithServices(const std::map<std::string, std::string>& env,
                                          const ServiceSetup& setup) {
  return ClusterAccess::Join(env, setup);
}

NodeServices Services(Cluster& cluster) { return ClusterAccess::Services(cluster); }

}  // namespace cluster

Role Cluster::role() const { return impl_->membership->self().role; }
int Cluster::rank() const { return impl_->membership->self().rank; }
int Cluster::id() const { return impl_->membership->self().id; }
int Cluster::num_workers() const { return impl_->membership->table().num_workers; }
int Cluster::num_servers() const { return impl_->membership->table().num_servers; }
const std::vector<NodeInfo>& Cluster::nodes() const { return impl_->membership->table().nodes; }
void Cluster::Barrier(int groups) { impl_->membership->Barrier(groups); }
void Cluster::CheckHealth() const { impl_->membership->CheckHealth(); }

void Cluster::Finalize() { impl_->Finalize(); }

// ServeAssignedRole() is defined in src/kv/serve_role.cc: a server runs the
// parameter server, which this layer does not know.

}  // namespace tandem
