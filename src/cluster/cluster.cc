// tandem::Cluster: wires a process's objects together from its environment
// (config, logger, transport, the scheduler service when this process is
// the scheduler, the membership client) and exposes the public API.
#include "tandem/cluster.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <thread>

#include "base/clock.h"
#include "base/config.h"
#include "base/environment.h"
#include "base/exit_code.h"
#include "base/logger.h"
#include "cluster/dmlc_contract.h"
#include "cluster/membership.h"
#include "cluster/node_address.h"
#include "cluster/node_services.h"
#include "cluster/scheduler.h"
#include "net/message_dispatcher.h"
#include "net/reliable_transport.h"
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
  std::unique_ptr<net::Transport> transport;
  std::unique_ptr<cluster::Scheduler> scheduler;
  std::unique_ptr<cluster::Membership> membership;
  bool finalized = false;
  // Collectives-only jobs (TANDEM_RENDEZVOUS_IN_PROCESS=1): worker 0 runs
  // the scheduler node too, with its own transport, on `rendezvous_thread`
  // (docs/collectives.md, "Jobs without a scheduler process").
  std::unique_ptr<Impl> rendezvous;
  std::thread rendezvous_thread;
  std::exception_ptr rendezvous_error;  // written by rendezvous_thread before it ends

  explicit Impl(base::Environment e)
      : env(std::move(e)),
        config(base::Config::FromEnvironment(env)),
        desc(ParseContract(env)),
        log(std::string(RoleName(desc.role)), config.verbose) {}

  static cluster::ProcessDescription ParseContract(const base::Environment& env) {
    if (!cluster::HasDmlcContract(env)) {
      throw ConfigError(
          "no start-up contract in the environment: DMLC_ROLE is not set (start the program "
          "with `tandem launch`, or set DMLC_ROLE, DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT, "
          "DMLC_NUM_SERVER and DMLC_NUM_WORKER as MXNet's launch.py does)");
    }
    return cluster::ParseDmlcContract(env);
  }

  void Start(const cluster::ServiceSetup& setup, bool join = true) {
    if (desc.role == Role::kWorker && desc.requested_rank == 0 &&
        env.GetBool("TANDEM_RENDEZVOUS_IN_PROCESS", false)) {
      StartRendezvous();
    }
    log.V1("start-up contract: {} (role {}, scheduler {}:{}, {} servers, {} workers)",
           desc.contract, RoleName(desc.role), desc.scheduler_host, desc.scheduler_port,
           desc.num_servers, desc.num_workers);
    net::TransportOptions topts;
    topts.job_id = config.job_id;
    topts.secret = config.secret;
    topts.limits.max_meta_bytes = config.max_meta_bytes;
    topts.limits.max_payload_bytes = config.max_payload_bytes;
    topts.handshake_timeout = config.handshake_timeout;
    auto make_tcp = [&](net::TransportHandler* handler) -> std::unique_ptr<net::Transport> {
      return std::make_unique<net::TcpTransport>(topts, handler, log);
    };
    if (config.resend) {
      // PS_RESEND=1: every message of this process, cluster ones included,
      // goes through acks and resend (docs/protocol-resend.md).
      transport = std::make_unique<net::ReliableTransport>(net::ReliableOptions::FromConfig(config),
                                                           &dispatcher, log, make_tcp);
    } else {
      transport = make_tcp(&dispatcher);
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
      s.barrier_timeout = config.barrier_timeout;
      scheduler = std::make_unique<cluster::Scheduler>(s, *transport, log, clock);
      dispatcher.Register(cluster::msg::kRegister, cluster::msg::kSchedulerBoundLast,
                          scheduler.get());
      // Only now: a node may register the moment the port is open.
      transport->Listen({bind_host, desc.scheduler_port});
      log.Info("scheduler listening on {}:{} for {} servers and {} workers", bind_host,
               desc.scheduler_port, desc.num_servers, desc.num_workers);
      m.scheduler = {bind_all ? "127.0.0.1" : desc.scheduler_host, desc.scheduler_port};
      m.host = desc.scheduler_host;
      m.port = desc.scheduler_port;
    } else {
      m.scheduler = {desc.scheduler_host, desc.scheduler_port};
      m.host = cluster::SelectNodeHost(desc, config.connect_timeout, log);
      std::string bind_host = cluster::IsIpLiteral(m.host) ? m.host : "0.0.0.0";
      m.port = transport->Listen({bind_host, 0}).port;
    }
    membership = std::make_unique<cluster::Membership>(m, *transport, log, clock);
    dispatcher.Register(cluster::msg::kNodeBoundFirst, cluster::msg::kNodeBoundLast,
                        membership.get());
    if (setup) {
      cluster::NodeServices services = Services();
      setup(services);
    }
    if (join) membership->Join();
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
    rendezvous->Start(nullptr, /*join=*/false);
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
    return {env, config, log, clock, *transport, dispatcher, *membership};
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
