// A whole job inside one test process: a scheduler and any number of
// servers and workers, each node with its own in-process transport,
// dispatcher, logger and membership, as a process has. Tests of the layers
// above cluster/ (kv, collective) take each node's NodeServices and run
// their services on it; RunAll runs a body per node on its own thread.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/config.h"
#include "base/environment.h"
#include "base/logger.h"
#include "cluster/membership.h"
#include "cluster/node_services.h"
#include "cluster/scheduler.h"
#include "net/inproc_transport.h"
#include "net/message_dispatcher.h"
#include "tandem/error.h"

namespace tandem::testing {

using cluster::Membership;
using cluster::Scheduler;
namespace msg = cluster::msg;

using std::chrono::milliseconds;

struct Timings {
  milliseconds heartbeat_interval{100};
  milliseconds heartbeat_timeout{2000};
  milliseconds start_timeout{10000};
  milliseconds barrier_timeout{10000};
};

// One node: its own transport, dispatcher and logger, as a process has.
struct TestNode {
  base::Environment env;
  base::Config config;
  base::SteadyClock clock;
  base::Logger log;
  net::MessageDispatcher dispatcher;
  base::StatsRegistry stats;
  std::unique_ptr<net::InProcTransport> transport;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<Membership> membership;

  TestNode(net::InProcNetwork& network, std::string tag)
      // PS_VERBOSE=1 or 2 shows the protocol when a test fails.
      : env(base::Environment::FromProcess()),
        config(base::Config::FromEnvironment(env)),
        log(std::move(tag),
            static_cast<int>(base::Environment::FromProcess().GetInt("PS_VERBOSE", 0))) {
    net::TransportOptions o;
    o.job_id = "cluster-test";
    o.secret = "s3cret";
    transport = std::make_unique<net::InProcTransport>(network, o, &dispatcher, log);
    dispatcher.SetTransport(transport.get());
  }
  // What the layers above cluster/ use; valid once `membership` exists.
  cluster::NodeServices services() {
    return {env, config, log, clock, *transport, dispatcher, *membership, stats};
  }

  ~TestNode() {
    transport->Shutdown();
    membership.reset();
    scheduler.reset();
  }
};

// A job of one scheduler, `servers` servers and `workers` workers. The
// scheduler and the memberships run on `clock` (borrowed; null: the real
// clock), e.g. a ManualClock the test advances.
class TestJob {
 public:
  TestJob(int servers, int workers, Timings t = {}, const base::Clock* clock = nullptr)
      : servers_(servers), workers_(workers), t_(t), clock_(clock ? *clock : steady_clock_) {
    scheduler_node_ = std::make_unique<TestNode>(network_, "scheduler");
    auto ep = scheduler_node_->transport->Listen({"sched", 0});
    scheduler_ep_ = ep;
    Scheduler::Options so;
    so.num_servers = servers;
    so.num_workers = workers;
    so.heartbeat_timeout = t.heartbeat_timeout;
    so.start_timeout = t.start_timeout;
    so.barrier_timeout = t.barrier_timeout;
    scheduler_node_->scheduler =
        std::make_unique<Scheduler>(so, *scheduler_node_->transport, scheduler_node_->log, clock_);
    scheduler_node_->dispatcher.Register(msg::kRegister, msg::kSchedulerBoundLast,
                                         scheduler_node_->scheduler.get());
    AddMember(scheduler_node_.get(), Role::kScheduler, -1, "sched", ep.port);
  }

  // Transports stop first: their callbacks reach the memberships and the
  // scheduler, which must outlive them (as in tandem::Cluster).
  ~TestJob() {
    for (auto& n : nodes_) n->transport->Shutdown();
    scheduler_node_->transport->Shutdown();
  }

  // Adds a server or worker node (not yet joined).
  TestNode* Add(Role role, int requested_rank = -1, Timings* own = nullptr) {
    auto node = std::make_unique<TestNode>(network_, std::string(RoleName(role)));
    std::string host = "host-" + std::to_string(nodes_.size());
    uint16_t port = node->transport->Listen({host, 0}).port;
    AddMember(node.get(), role, requested_rank, host, port, own);
    nodes_.push_back(std::move(node));
    return nodes_.back().get();
  }

  // Adds every server and worker, with ranks left to the scheduler.
  void AddAll() {
    for (int i = 0; i < servers_; ++i) Add(Role::kServer);
    for (int i = 0; i < workers_; ++i) Add(Role::kWorker);
  }

  // Runs `body(node)` for every node (scheduler included) on its own thread
  // after joining; returns each node's exception (or nullptr) in node order
  // (scheduler last).
  std::vector<std::exception_ptr> RunAll(const std::function<void(Membership&)>& body) {
    std::vector<TestNode*> all;
    for (auto& n : nodes_) all.push_back(n.get());
    all.push_back(scheduler_node_.get());
    std::vector<std::future<std::exception_ptr>> futures;
    for (TestNode* n : all) {
      futures.push_back(std::async(std::launch::async, [n, &body]() -> std::exception_ptr {
        try {
          n->membership->Join();
          body(*n->membership);
          return nullptr;
        } catch (...) {
          return std::current_exception();
        }
      }));
    }
    std::vector<std::exception_ptr> out;
    for (auto& f : futures) out.push_back(f.get());
    return out;
  }

  TestNode& node(size_t i) { return *nodes_[i]; }
  TestNode& scheduler() { return *scheduler_node_; }

 private:
  void AddMember(TestNode* node, Role role, int requested_rank, const std::string& host,
                 uint16_t port, Timings* own = nullptr) {
    const Timings& t = own ? *own : t_;
    Membership::Options m;
    m.role = role;
    m.requested_rank = requested_rank;
    m.scheduler = scheduler_ep_;
    m.host = host;
    m.port = port;
    m.connect_timeout = milliseconds(5000);
    m.start_timeout = t.start_timeout;
    m.barrier_timeout = t.barrier_timeout;
    m.heartbeat_interval = t.heartbeat_interval;
    m.heartbeat_timeout = t.heartbeat_timeout;
    node->membership = std::make_unique<Membership>(m, *node->transport, node->log, clock_);
    node->dispatcher.Register(msg::kNodeBoundFirst, msg::kNodeBoundLast, node->membership.get());
  }

  int servers_;
  int workers_;
  Timings t_;
  base::SteadyClock steady_clock_;
  const base::Clock& clock_;
  net::InProcNetwork network_;
  net::Endpoint scheduler_ep_;
  std::unique_ptr<TestNode> scheduler_node_;
  std::vector<std::unique_ptr<TestNode>> nodes_;
};

inline std::string What(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
  return "?";
}

template <typename E>
bool Is(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace tandem::testing
