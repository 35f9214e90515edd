#include "cluster/node.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>

#include "base/exit_code.h"
#include "cluster/dmlc_contract.h"
#include "cluster/job_secret_requirement.h"
#include "cluster/node_address.h"
#include "cluster/traffic_labels.h"
#include "metrics/prometheus_endpoint.h"
#include "net/reliable_transport.h"
#include "net/tcp_transport.h"
#include "tandem/error.h"

namespace tandem::cluster {
namespace {

// `env` is resolved already (startup_environment.h): it carries the DMLC
// variables whatever contract the process was started under.
ProcessDescription ParseContract(const base::Environment& env) {
  ProcessDescription d = ParseDmlcContract(env);
  d.contract = env.GetString(kResolvedContractVariable, "dmlc");
  return d;
}

}  // namespace

Node::Node(const base::Environment& env, NodeAssembly assembly)
    : Node(env, std::move(assembly), /*hosted=*/false) {}

Node::Node(const base::Environment& env, NodeAssembly assembly, bool hosted)
    : env_(ResolveStartupEnvironment(env)),
      config_(base::Config::FromEnvironment(env_)),
      desc_(ParseContract(env_)),
      log_(std::string(RoleName(desc_.role)), config_.verbose, 2, config_.quiet),
      clock_(assembly.clock != nullptr ? *assembly.clock : own_clock_),
      hosted_(hosted) {
  // Worker 0's hosted scheduler node shares its environment: checked once.
  if (!hosted_) RequireJobSecret(config_, desc_.contract, log_);
  if (desc_.role == Role::kWorker && desc_.requested_rank == 0 &&
      env_.GetBool("TANDEM_RENDEZVOUS_IN_PROCESS", false)) {
    StartRendezvous(assembly);
  }
  if (!hosted_) log_.Info("start-up contract: {}", desc_.contract);
  StartObservability();
  BuildTransport(assembly);
  MakeMembership(assembly.listen_on_announced_host);
  AddClusterMetrics();
}

void Node::BuildTransport(const NodeAssembly& assembly) {
  net::TransportOptions topts;
  topts.job_id = config_.job_id;
  topts.secret = config_.secret;
  topts.limits.max_meta_bytes = config_.max_meta_bytes;
  topts.limits.max_payload_bytes = config_.max_payload_bytes;
  topts.handshake_timeout = config_.handshake_timeout;
  topts.max_unauthenticated = static_cast<size_t>(config_.max_unauthenticated);
  topts.wait_report_interval = config_.wait_report_interval;
  // TANDEM_TLS=1: the files are checked here, so a bad one stops this
  // process with its name rather than failing connections elsewhere.
  if (config_.tls) {
    topts.tls = net::TlsContext::Load({config_.tls_cert, config_.tls_key, config_.tls_ca});
  }
  auto role_label = [this](int id) { return RoleLabel(id); };
  meter_ = std::make_unique<net::TrafficMeter>(stats_, NodeTrafficLabels(role_label));
  send_queue_meter_ = std::make_unique<net::SendQueueMeter>(stats_, NodeTrafficLabels(role_label));
  TransportFactory make = assembly.transport;
  if (!make) {
    // TANDEM_MAX_INFLIGHT_BYTES bounds each connection's send queue
    // (docs/transport.md, "Back-pressure"), TANDEM_TCP_RTO_MIN_MS the floor
    // of the retransmission time-out.
    net::TcpTuning tuning = net::TcpTuning::FromEnvironment(env_);
    tuning.send_queue.meter = send_queue_meter_.get();
    make = [this, tuning](const net::TransportOptions& o, net::TransportHandler* handler,
                          base::Logger& log) -> std::unique_ptr<net::Transport> {
      auto t = std::make_unique<net::TcpTransport>(o, handler, log, tuning);
      tcp_ = t.get();
      return t;
    };
  }
  auto make_inner = [this, make, topts](net::TransportHandler* handler) {
    return make(topts, handler, log_);
  };
  transport_ = std::make_unique<net::MeteredTransport>(*meter_, &dispatcher_);
  if (config_.resend) {
    // PS_RESEND=1: every message of this process, cluster ones included,
    // goes through acks and resend (docs/protocol-resend.md).
    auto r = std::make_unique<net::ReliableTransport>(net::ReliableOptions::FromConfig(config_),
                                                      transport_.get(), log_, make_inner, &clock_);
    reliable_ = r.get();
    transport_->SetInner(std::move(r));
  } else {
    transport_->SetInner(make_inner(transport_.get()));
  }
  dispatcher_.SetTransport(transport_.get());
}

void Node::MakeMembership(bool listen_on_announced_host) {
  Membership::Options m;
  m.role = desc_.role;
  m.requested_rank = desc_.requested_rank;
  m.connect_timeout = config_.connect_timeout;
  m.start_timeout = config_.start_timeout;
  m.barrier_timeout = config_.barrier_timeout;
  m.heartbeat_interval = config_.heartbeat_interval;
  m.heartbeat_timeout = config_.heartbeat_timeout;
  m.wait_report_interval = config_.wait_report_interval;
  if (desc_.role == Role::kScheduler) {
    // A name (a Kubernetes Service, say) may not be an address of this
    // host, so bind every interface then; MXJob asks for that explicitly.
    bool bind_all =
        !listen_on_announced_host && (desc_.use_kubernetes || !IsIpLiteral(desc_.scheduler_host));
    std::string bind_host = bind_all ? "0.0.0.0" : desc_.scheduler_host;
    Scheduler::Options s;
    s.num_servers = desc_.num_servers;
    s.num_workers = desc_.num_workers;
    s.heartbeat_timeout = config_.heartbeat_timeout;
    s.start_timeout = config_.start_timeout;
    s.wait_report_interval = config_.wait_report_interval;
    s.barrier_timeout = config_.barrier_timeout;
    // Elastic worker counts (docs/elastic.md): unset or equal to the worker
    // count, every lost worker fails the job.
    s.min_workers =
        static_cast<int>(env_.GetInt("TANDEM_MIN_WORKERS", 0, 0, std::max(desc_.num_workers, 1)));
    s.elastic_timeout = env_.GetSeconds("TANDEM_ELASTIC_TIMEOUT", s.elastic_timeout);
    if (s.elastic_timeout > s.barrier_timeout) {
      // The workers wait in a regroup, a barrier: it would time out first.
      log_.Warn("TANDEM_ELASTIC_TIMEOUT ({} ms) is cut to TANDEM_BARRIER_TIMEOUT ({} ms)",
                s.elastic_timeout.count(), s.barrier_timeout.count());
      s.elastic_timeout = s.barrier_timeout;
    }
    if (s.min_workers > 0 && s.min_workers < s.num_workers) {
      log_.Info(
          "elastic job: a lost worker leaves it while {} or more of {} workers remain "
          "(TANDEM_MIN_WORKERS){}",
          s.min_workers, s.num_workers,
          s.num_servers == 0 && s.elastic_timeout.count() > 0
              ? fmt::format("; below that the job waits up to {:.0f} s for workers to join "
                            "(TANDEM_ELASTIC_TIMEOUT)",
                            std::chrono::duration<double>(s.elastic_timeout).count())
              : std::string());
    }
    scheduler_ = std::make_unique<Scheduler>(s, *transport_, log_, clock_);
    dispatcher_.Register(msg::kRegister, msg::kSchedulerBoundLast, scheduler_.get());
    // Only now: a node may register the moment the port is open.
    auto bound = transport_->Listen({bind_host, desc_.scheduler_port});
    if (desc_.scheduler_port == 0) desc_.scheduler_port = bound.port;  // a process alone
    log_.Info("scheduler listening on {}:{} for {} servers and {} workers", bind_host,
              desc_.scheduler_port, desc_.num_servers, desc_.num_workers);
    m.scheduler = {bind_all ? "127.0.0.1" : desc_.scheduler_host, desc_.scheduler_port};
    m.host = desc_.scheduler_host;
    m.port = desc_.scheduler_port;
  } else {
    m.scheduler = {desc_.scheduler_host, desc_.scheduler_port};
    try {
      m.host = SelectNodeHost(desc_, config_.connect_timeout, log_);
    } catch (const Timeout& e) {
      throw Timeout(fmt::format(
          "waited {} ms (TANDEM_CONNECT_TIMEOUT) for the scheduler's host '{}' (start-up "
          "contract {}) to resolve, to learn this node's address: {}",
          config_.connect_timeout.count(), desc_.scheduler_host, desc_.contract, e.what()));
    }
    std::string bind_host = listen_on_announced_host || IsIpLiteral(m.host) ? m.host : "0.0.0.0";
    m.port = transport_->Listen({bind_host, 0}).port;
  }
  membership_ = std::make_unique<Membership>(m, *transport_, log_, clock_);
  membership_->AddFailureListener([this](const std::string&, const std::exception_ptr&) {
    job_failed_ = true;
    // A node stops resending to peers that no longer answer, so that its
    // blocked calls return and it exits now (docs/protocol-resend.md,
    // "After a failure"). The scheduler process first lets its lost-node
    // notices reach the others (the destructor).
    if (reliable_ && !scheduler_) reliable_->AbandonUnacknowledged();
  });
  dispatcher_.Register(msg::kNodeBoundFirst, msg::kNodeBoundLast, membership_.get());
}

NodeServices Node::Services() {
  return {env_,        config_,      log_,   clock_,          *transport_,
          dispatcher_, *membership_, stats_, timeline_.get(), meter_.get()};
}

void Node::Attach(std::shared_ptr<void> service, std::function<void()> stop) {
  attached_.push_back({std::move(service), std::move(stop)});
}

void Node::Join() {
  membership_->Join();
  const NodeInfo& self = membership_->self();
  stats_.SetConstantLabels({{"role", std::string(RoleName(self.role))},
                            {"rank", std::to_string(std::max(self.rank, 0))}});
  if (timeline_) {
    timeline_->SetProcessName(self.role == Role::kScheduler
                                  ? std::string("scheduler")
                                  : fmt::format("{} {}", RoleName(self.role), self.rank));
  }
}

// The role label of node `id` ("0 is the scheduler, then servers, then
// workers": tandem/cluster.h), for the traffic counters.
const char* Node::RoleLabel(int id) const {
  if (id == 0) return "scheduler";
  if (id <= desc_.num_servers) return "server";
  if (id <= desc_.num_servers + desc_.num_workers) return "worker";
  return "unknown";
}

// TANDEM_METRICS_PORT and TANDEM_TIMELINE (docs/metrics.md); not for the
// scheduler node that worker 0 hosts, which is part of worker 0's process.
void Node::StartObservability() {
  if (hosted_) return;
  stats_.SetConstantLabels({{"role", std::string(RoleName(desc_.role))}});
  if (auto path = env_.Get("TANDEM_TIMELINE"); path && !path->empty()) {
    std::string file = fmt::format("{}.{}", *path, ::getpid());
    timeline_ = std::make_unique<base::Timeline>(file, static_cast<int>(::getpid()),
                                                 std::string(RoleName(desc_.role)));
    log_.Info("writing the communication timeline to {}", file);
  }
  if (auto port = env_.Get("TANDEM_METRICS_PORT"); port && !port->empty()) {
    const auto first = static_cast<uint16_t>(env_.GetInt("TANDEM_METRICS_PORT", 0, 0, 65535));
    // Loopback unless asked: the counters name peers and ports, and a
    // scraper in another pod or host needs TANDEM_METRICS_ADDRESS=0.0.0.0.
    const std::string address = env_.GetString("TANDEM_METRICS_ADDRESS", "127.0.0.1");
    // Several processes on one host: each takes the next free port of
    // first..first+63.
    const int tries = first == 0 ? 1 : std::min(64, 65536 - first);
    for (int i = 0; i < tries && !endpoint_; ++i) {
      try {
        endpoint_ = std::make_unique<metrics::PrometheusEndpoint>(stats_, address,
                                                                  static_cast<uint16_t>(first + i));
      } catch (const IoError& e) {
        if (i + 1 == tries) {
          throw IoError(fmt::format("TANDEM_METRICS_PORT={}: no free port in {}..{} on {}: {}",
                                    first, first, first + tries - 1, address, e.what()));
        }
      }
    }
    log_.Info("serving metrics at http://{}:{}/metrics", address, endpoint_->port());
  }
}

// Values read when scraped: heartbeat ages and the reliable layer's
// counters.
void Node::AddClusterMetrics() {
  if (hosted_) return;
  static constexpr const char* kAgeHelp =
      "Seconds since this node last heard from the peer (heartbeats keep it near "
      "PS_HEARTBEAT_INTERVAL).";
  auto& age = stats_.GetGauge("tandem_heartbeat_age_seconds", kAgeHelp,
                              {{"peer_role", "scheduler"}, {"peer_rank", "0"}});
  Membership* mem = membership_.get();
  stats_.AddRefresher([mem, &age] { age.Set(mem->SinceLastHeard().count() / 1e3); });
  if (scheduler_) {
    Scheduler* sched = scheduler_.get();
    base::StatsRegistry* reg = &stats_;
    stats_.AddRefresher([this, sched, reg] {
      for (const auto& [id, silence] : sched->Silences()) {
        const char* role = RoleLabel(id);
        int rank = std::string_view(role) == "server" ? id - 1 : id - 1 - desc_.num_servers;
        reg->GetGauge("tandem_heartbeat_age_seconds", kAgeHelp,
                      {{"peer_role", role}, {"peer_rank", std::to_string(rank)}})
            .Set(silence.count() / 1e3);
      }
    });
  }
  if (tcp_) {
    net::TcpTransport* t = tcp_;
    auto& now = stats_.GetGauge("tandem_unauthenticated_connections",
                                "Accepted connections that have not finished the handshake.");
    auto& dropped = stats_.GetCounter(
        "tandem_unauthenticated_dropped_total",
        "Connections dropped before they authenticated: refused, timed out, or the oldest "
        "past TANDEM_MAX_UNAUTHENTICATED.");
    stats_.AddRefresher([t, &now, &dropped] {
      const net::UnauthenticatedStats st = t->Unauthenticated();
      now.Set(static_cast<double>(st.now));
      if (st.dropped > dropped.value()) dropped.Add(st.dropped - dropped.value());
    });
  }
  if (reliable_) {
    net::ReliableTransport* rel = reliable_;
    auto& resent = stats_.GetCounter("tandem_retransmits_total",
                                     "Messages sent again after no acknowledgement (PS_RESEND).");
    auto& dups = stats_.GetCounter("tandem_duplicates_received_total",
                                   "Copies of already delivered messages dropped (PS_RESEND).");
    auto& unacked = stats_.GetGauge("tandem_unacknowledged_messages",
                                    "Messages sent and not yet acknowledged (PS_RESEND).");
    auto& waiting = stats_.GetGauge("tandem_send_window_waiting_messages",
                                    "Messages queued behind a full resend window (PS_RESEND).");
    stats_.AddRefresher([rel, &resent, &dups, &unacked, &waiting] {
      net::ReliableStats st = rel->Stats();
      // Mirrors of monotonic counters: add what is new (Refresh runs one at
      // a time).
      if (st.resent > resent.value()) resent.Add(st.resent - resent.value());
      if (st.duplicates > dups.value()) dups.Add(st.duplicates - dups.value());
      unacked.Set(static_cast<double>(st.unacked_now));
      waiting.Set(static_cast<double>(st.waiting_now));
    });
  }
  if (timeline_) {
    base::Timeline* tl = timeline_.get();
    membership_->AddFailureListener([tl, this](const std::string& text, const std::exception_ptr&) {
      tl->Instant("cluster", "job failed: " + text, clock_.Now());
    });
  }
}

// The scheduler node of a collectives-only job, hosted by worker 0: it
// listens at the scheduler address before this worker registers, then joins
// and finalizes on its own thread, as a scheduler process would.
void Node::StartRendezvous(const NodeAssembly& assembly) {
  auto vars = env_.vars();
  vars["DMLC_ROLE"] = "scheduler";
  vars.erase("DMLC_WORKER_ID");
  vars.erase("TANDEM_RENDEZVOUS_IN_PROCESS");
  rendezvous_.reset(new Node(base::Environment(vars), assembly, /*hosted=*/true));
  desc_.scheduler_port = rendezvous_->desc_.scheduler_port;  // chosen there when it was 0
  log_.Info("worker 0 hosts the rendezvous in-process at {}:{}", desc_.scheduler_host,
            desc_.scheduler_port);
  rendezvous_thread_ = std::thread([this] {
    try {
      rendezvous_->Join();
      rendezvous_->Finalize();
    } catch (...) {
      rendezvous_error_ = std::current_exception();
    }
  });
}

void Node::Finalize() {
  membership_->Finalize();
  finalized_ = true;
  if (scheduler_) {
    auto limit = config_.heartbeat_timeout + std::chrono::seconds(10);
    if (!scheduler_->WaitUntilAllLeft(limit)) {
      if (auto failure = scheduler_->failure()) throw PeerLost(*failure);
      throw Timeout(
          fmt::format("not every node left within {} ms after the final barrier", limit.count()));
    }
    log_.Info("every node left; the job is complete");
  }
  if (rendezvous_thread_.joinable()) {
    rendezvous_thread_.join();
    if (rendezvous_error_) std::rethrow_exception(rendezvous_error_);
  }
}

Node::~Node() {
  // The services' threads and communicators stop while the transport runs.
  for (auto it = attached_.rbegin(); it != attached_.rend(); ++it) {
    if (!it->stop) continue;
    try {
      it->stop();
    } catch (const std::exception& e) {
      log_.Error("stopping a service of this node failed: {}", e.what());
    }
  }
  if (rendezvous_thread_.joinable()) {
    // This worker leaves without finalizing: stop the hosted scheduler,
    // which wakes its thread with the loss of its connections.
    if (membership_ && !finalized_) membership_->Close();
    if (rendezvous_->transport_) rendezvous_->transport_->Shutdown();
    rendezvous_thread_.join();
  }
  if (membership_ && !finalized_) membership_->Close();
  if (scheduler_ && scheduler_->failure()) {
    // Let the lost-node notices reach every node before this process goes.
    scheduler_->DrainConnections(std::chrono::seconds(3));
  }
  // After a failure, what is still unacknowledged is bound for lost or
  // cut-off peers: exit now instead of lingering for the retry budget.
  if (reliable_ && (job_failed_ || (scheduler_ && scheduler_->failure()))) {
    reliable_->AbandonUnacknowledged();
  }
  if (transport_) transport_->Shutdown();
  // The transport calls no service any more: release them, newest first.
  while (!attached_.empty()) attached_.pop_back();
}

std::unique_ptr<Node::Hold> Node::NewHold(const std::shared_ptr<Node>& node) {
  std::lock_guard lock(node->holds_mu_);
  ++node->holds_;
  return std::unique_ptr<Hold>(new Hold(node));
}

void Node::Hold::Release(bool graceful) {
  if (released_) return;
  released_ = true;
  bool last = false;
  {
    std::lock_guard lock(node_->holds_mu_);
    last = --node_->holds_ == 0;
  }
  if (last && graceful && !node_->finalized_) node_->Finalize();
}

Node::Hold::~Hold() {
  if (!released_ && node_) Release(false);
}

std::shared_ptr<Node> JoinNode(const base::Environment& env, const ServiceSetup& setup) {
  auto node = std::make_shared<Node>(env);
  if (setup) {
    NodeServices services = node->Services();
    setup(services);
  }
  node->Join();
  return node;
}

}  // namespace tandem::cluster
