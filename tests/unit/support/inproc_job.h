// A whole job inside one test process: a scheduler and any number of
// servers and workers, each a cluster::Node assembled as a process's is
// (cluster/node.h: from its DMLC environment, a transport factory and a
// clock), with the in-process transport on one network and the job's clock
// (a ManualClock the test advances, or the real one). Tests of the layers
// above cluster/ (kv, collective) take each node's NodeServices and run
// their services on it; RunAll joins every node and runs a body per node on
// its own thread.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/environment.h"
#include "base/logger.h"
#include "base/stats.h"
#include "cluster/membership.h"
#include "cluster/node.h"
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

// One node of the job and the parts of it tests reach for.
struct TestNode {
  explicit TestNode(std::unique_ptr<cluster::Node> assembled)
      : node(std::move(assembled)),
        transport(&node->transport()),
        membership(&node->membership()),
        scheduler(node->scheduler()),
        log(node->log()),
        stats(node->Services().stats),
        dispatcher(node->Services().dispatcher) {}
  // What the layers above cluster/ use.
  cluster::NodeServices services() { return node->Services(); }

  std::unique_ptr<cluster::Node> node;
  net::Transport* transport;
  Membership* membership;
  Scheduler* scheduler;  // the scheduler's node only
  base::Logger& log;
  base::StatsRegistry& stats;
  net::MessageDispatcher& dispatcher;
};

// A job of one scheduler, `servers` servers and `workers` workers, on
// `clock` (borrowed; null: the real clock).
class TestJob {
 public:
  // `env`: further variables for every node (TANDEM_MIN_WORKERS, say).
  TestJob(int servers, int workers, Timings t = {}, const base::Clock* clock = nullptr,
          std::map<std::string, std::string> env = {})
      : servers_(servers),
        workers_(workers),
        t_(t),
        env_(std::move(env)),
        clock_(clock ? *clock : steady_clock_) {
    scheduler_node_ = Assemble(Role::kScheduler, -1, "sched", t_);
    scheduler_port_ = scheduler_node_->node->scheduler_port();
  }

  ~TestJob() { Clear(); }

  // Destroys every node (each stops its transport before its membership),
  // the servers and workers first, so that the scheduler sees their
  // connections close (and does not wait for them to drain) as it goes.
  // Services made on the nodes' NodeServices must be stopped before and
  // destroyed after.
  void Clear() {
    late_.clear();
    nodes_.clear();
    scheduler_node_.reset();
  }

  // Adds a server or worker node (assembled, not yet joined), on a host of
  // its own unless `host` names one.
  TestNode* Add(Role role, int requested_rank = -1, Timings* own = nullptr,
                const std::string& host = "") {
    nodes_.push_back(Assemble(role, requested_rank,
                              host.empty() ? "host-" + std::to_string(nodes_.size()) : host,
                              own ? *own : t_));
    return nodes_.back().get();
  }

  // Adds a node that RunAll leaves alone: one that joins the running job
  // later (docs/elastic.md, "Workers that join"), whose node->Join() the
  // test calls on a thread of its own.
  TestNode* AddLate(Role role, const std::string& host, int requested_rank = -1) {
    late_.push_back(Assemble(role, requested_rank, host, t_));
    return late_.back().get();
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
          n->node->Join();
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
  static std::string Seconds(milliseconds d) { return fmt::format("{:.3f}", d.count() / 1e3); }

  // The node a process of `role` would be with the DMLC variables of this
  // job, on the in-process network.
  std::unique_ptr<TestNode> Assemble(Role role, int requested_rank, const std::string& host,
                                     const Timings& t) {
    std::map<std::string, std::string> vars = {
        {"DMLC_ROLE", std::string(RoleName(role))},
        {"DMLC_PS_ROOT_URI", "sched"},
        {"DMLC_PS_ROOT_PORT", std::to_string(scheduler_port_)},
        {"DMLC_NUM_SERVER", std::to_string(servers_)},
        {"DMLC_NUM_WORKER", std::to_string(workers_)},
        {"DMLC_NODE_HOST", host},
        {"TANDEM_JOB_ID", "cluster-test"},
        {"TANDEM_SECRET", "s3cret"},
        {"TANDEM_CONNECT_TIMEOUT", "5"},
        {"PS_HEARTBEAT_INTERVAL", Seconds(t.heartbeat_interval)},
        {"PS_HEARTBEAT_TIMEOUT", Seconds(t.heartbeat_timeout)},
        {"TANDEM_START_TIMEOUT", Seconds(t.start_timeout)},
        {"TANDEM_BARRIER_TIMEOUT", Seconds(t.barrier_timeout)},
        // PS_VERBOSE=1 or 2 shows the protocol when a test fails; quiet
        // otherwise.
        {"PS_VERBOSE", base::Environment::FromProcess().GetString("PS_VERBOSE", "0")}};
    for (const auto& [name, value] : env_) vars[name] = value;
    if (requested_rank >= 0) {
      vars[role == Role::kServer ? "DMLC_SERVER_ID" : "DMLC_WORKER_ID"] =
          std::to_string(requested_rank);
    }
    cluster::NodeAssembly assembly;
    net::InProcNetwork* network = &network_;
    assembly.transport = [network](const net::TransportOptions& o, net::TransportHandler* handler,
                                   base::Logger& log) -> std::unique_ptr<net::Transport> {
      return std::make_unique<net::InProcTransport>(*network, o, handler, log);
    };
    assembly.clock = &clock_;
    assembly.listen_on_announced_host = true;
    return std::make_unique<TestNode>(
        std::make_unique<cluster::Node>(base::Environment(vars), std::move(assembly)));
  }

  int servers_;
  int workers_;
  Timings t_;
  std::map<std::string, std::string> env_;
  base::SteadyClock steady_clock_;
  const base::Clock& clock_;
  net::InProcNetwork network_;  // outlives every node
  // Any port will do on a network of its own; the scheduler's must be
  // known before it listens, as in a real job.
  uint16_t scheduler_port_ = 9091;
  std::unique_ptr<TestNode> scheduler_node_;
  std::vector<std::unique_ptr<TestNode>> nodes_;
  std::vector<std::unique_ptr<TestNode>> late_;  // AddLate's
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
