// The membership protocol with every node of a job as threads in one
// process over the in-process transport: formation, ranks, barriers, lost
// nodes, timeouts.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/environment.h"
#include "base/logger.h"
#include "cluster/membership.h"
#include "cluster/scheduler.h"
#include "net/inproc_transport.h"
#include "net/message_dispatcher.h"
#include "tandem/error.h"

namespace tandem::cluster {
namespace {

using std::chrono::milliseconds;

struct Timings {
  milliseconds heartbeat_interval{100};
  milliseconds heartbeat_timeout{2000};
  milliseconds start_timeout{10000};
  milliseconds barrier_timeout{10000};
};

// One node: its own transport, dispatcher and logger, as a process has.
struct TestNode {
  base::Logger log;
  net::MessageDispatcher dispatcher;
  std::unique_ptr<net::InProcTransport> transport;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<Membership> membership;

  TestNode(net::InProcNetwork& network, std::string tag)
      // PS_VERBOSE=1 or 2 shows the protocol when a test fails.
      : log(std::move(tag),
            static_cast<int>(base::Environment::FromProcess().GetInt("PS_VERBOSE", 0))) {
    net::TransportOptions o;
    o.job_id = "cluster-test";
    o.secret = "s3cret";
    transport = std::make_unique<net::InProcTransport>(network, o, &dispatcher, log);
    dispatcher.SetTransport(transport.get());
  }
  ~TestNode() {
    transport->Shutdown();
    membership.reset();
    scheduler.reset();
  }
};

// A job of one scheduler, `servers` servers and `workers` workers.
class TestJob {
 public:
  TestJob(int servers, int workers, Timings t = {}) : servers_(servers), workers_(workers), t_(t) {
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
  base::SteadyClock clock_;
  net::InProcNetwork network_;
  net::Endpoint scheduler_ep_;
  std::unique_ptr<TestNode> scheduler_node_;
  std::vector<std::unique_ptr<TestNode>> nodes_;
};

std::string What(const std::exception_ptr& e) {
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

class ClusterFormation : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(ClusterFormation, RanksAreDenseAndTablesAgree) {
  auto [servers, workers] = GetParam();
  TestJob job(servers, workers);
  job.AddAll();
  std::mutex mu;
  std::set<std::pair<int, int>> seen;  // (role, rank)
  std::set<std::string> tables;
  auto errors = job.RunAll([&](Membership& m) {
    std::string table;
    for (const auto& n : m.table().nodes) table += n.ToString() + ";";
    {
      std::lock_guard lock(mu);
      EXPECT_TRUE(seen.emplace(static_cast<int>(m.self().role), m.self().rank).second);
      tables.insert(table);
    }
    m.Finalize();
  });
  for (const auto& e : errors) EXPECT_EQ(e, nullptr) << What(e);
  EXPECT_EQ(tables.size(), 1u);
  EXPECT_EQ(seen.size(), static_cast<size_t>(1 + servers + workers));
  for (int r = 0; r < servers; ++r) EXPECT_TRUE(seen.contains({1, r})) << "server " << r;
  for (int r = 0; r < workers; ++r) EXPECT_TRUE(seen.contains({2, r})) << "worker " << r;
  EXPECT_TRUE(job.scheduler().scheduler->WaitUntilAllLeft(milliseconds(5000)));
}

TEST_P(ClusterFormation, BarriersOverEveryGroupMask) {
  auto [servers, workers] = GetParam();
  TestJob job(servers, workers);
  job.AddAll();
  const int masks[] = {group::kAll, group::kWorkers, group::kServers | group::kWorkers,
                       group::kScheduler | group::kWorkers, group::kScheduler,
                       group::kScheduler | group::kServers};
  std::atomic<int> passed{0};
  auto errors = job.RunAll([&](Membership& m) {
    for (int i = 0; i < 30; ++i) {
      int mask = masks[i % 6];
      if (!InGroups(m.self(), mask)) continue;
      m.Barrier(mask);
      ++passed;
    }
    m.Finalize();
  });
  for (const auto& e : errors) EXPECT_EQ(e, nullptr) << What(e);
  // Per round of six masks: the scheduler is in 4, a server in 3, a worker in 4.
  EXPECT_EQ(passed.load(), 5 * (4 + 3 * servers + 4 * workers));
}

INSTANTIATE_TEST_SUITE_P(Sizes, ClusterFormation,
                         ::testing::Values(std::pair{0, 1}, std::pair{1, 1}, std::pair{2, 4},
                                           std::pair{3, 5}));

TEST(Cluster, RequestedRanksAreHonoured) {
  TestJob job(2, 3);
  job.Add(Role::kWorker, 2);
  job.Add(Role::kWorker, 0);
  job.Add(Role::kWorker, 1);
  job.Add(Role::kServer, 1);
  job.Add(Role::kServer, 0);
  auto errors = job.RunAll([](Membership& m) { m.Finalize(); });
  for (const auto& e : errors) EXPECT_EQ(e, nullptr) << What(e);
  EXPECT_EQ(job.node(0).membership->self().rank, 2);
  EXPECT_EQ(job.node(1).membership->self().rank, 0);
  EXPECT_EQ(job.node(2).membership->self().rank, 1);
  EXPECT_EQ(job.node(3).membership->self().rank, 1);
  EXPECT_EQ(job.node(4).membership->self().rank, 0);
  // Ids follow the role order: scheduler, servers by rank, workers by rank.
  EXPECT_EQ(job.node(4).membership->self().id, 1);
  EXPECT_EQ(job.node(1).membership->self().id, 3);
}

TEST(Cluster, AnExtraWorkerIsRejectedAndTheJobStillForms) {
  TestJob job(0, 2);
  job.Add(Role::kWorker);
  job.Add(Role::kWorker);
  TestNode* extra = job.Add(Role::kWorker);
  auto errors = job.RunAll([](Membership& m) { m.Finalize(); });
  int rejected = 0;
  for (const auto& e : errors) {
    if (e == nullptr) continue;
    ++rejected;
    EXPECT_TRUE(Is<ConfigError>(e)) << What(e);
    // Either "expects 2 worker(s)" or, once formed, "... and 2 workers".
    EXPECT_NE(What(e).find("2 worker"), std::string::npos) << What(e);
  }
  // Which of the three registered last is a race; exactly one is refused.
  EXPECT_EQ(rejected, 1);
  (void)extra;
}

TEST(Cluster, StartTimeoutNamesWhoIsMissing) {
  Timings t;
  t.start_timeout = milliseconds(400);
  TestJob job(1, 2, t);
  job.Add(Role::kWorker);  // the server and one worker never come
  auto errors = job.RunAll([](Membership& m) { m.Finalize(); });
  for (const auto& e : errors) {
    ASSERT_NE(e, nullptr);
    EXPECT_TRUE(Is<Timeout>(e)) << What(e);
    EXPECT_NE(What(e).find("1 of 1 server(s)"), std::string::npos) << What(e);
    EXPECT_NE(What(e).find("1 of 2 worker(s)"), std::string::npos) << What(e);
  }
}

TEST(Cluster, ALostWorkerIsNamedOnEveryOtherNode) {
  TestJob job(1, 3);
  job.AddAll();
  // Worker nodes are 1..3 (node 0 is the server). The one whose rank is 1
  // vanishes without leaving after the first barrier.
  auto errors = job.RunAll([](Membership& m) {
    m.Barrier(group::kAll);
    if (m.self().role == Role::kWorker && m.self().rank == 1) {
      m.Close();
      return;
    }
    m.Barrier(group::kAll);
    m.Finalize();
  });
  int lost = 0;
  for (const auto& e : errors) {
    if (e == nullptr) continue;  // the worker that left
    ++lost;
    EXPECT_TRUE(Is<PeerLost>(e)) << What(e);
    EXPECT_NE(What(e).find("lost worker 1 (node 3"), std::string::npos) << What(e);
  }
  EXPECT_EQ(lost, 4);
  auto failure = job.scheduler().scheduler->failure();
  ASSERT_TRUE(failure.has_value());
  EXPECT_NE(failure->find("worker 1"), std::string::npos) << *failure;
}

TEST(Cluster, ASilentNodeIsDeclaredLostAfterTheHeartbeatTimeout) {
  Timings t;
  t.heartbeat_timeout = milliseconds(600);
  TestJob job(0, 2, t);
  job.Add(Role::kWorker, 0);
  Timings mute = t;
  mute.heartbeat_interval = milliseconds(60000);  // never beats
  mute.heartbeat_timeout = milliseconds(120000);
  job.Add(Role::kWorker, 1, &mute);
  auto errors = job.RunAll([](Membership& m) {
    if (m.self().role == Role::kWorker && m.self().rank == 1) {
      // Stays connected but sends nothing past the scheduler's timeout;
      // then learns of its own loss as a closed connection.
      std::this_thread::sleep_for(milliseconds(1500));
      try {
        m.Finalize();
      } catch (const PeerLost&) {
      }
      return;
    }
    m.Finalize();
  });
  EXPECT_EQ(errors[1], nullptr);
  for (size_t i : {size_t{0}, size_t{2}}) {
    ASSERT_NE(errors[i], nullptr);
    EXPECT_TRUE(Is<PeerLost>(errors[i])) << What(errors[i]);
    EXPECT_NE(What(errors[i]).find("worker 1"), std::string::npos) << What(errors[i]);
    EXPECT_NE(What(errors[i]).find("no heartbeat"), std::string::npos) << What(errors[i]);
  }
}

TEST(Cluster, BarrierTimeoutNamesTheMissingNodes) {
  Timings t;
  t.barrier_timeout = milliseconds(400);
  TestJob job(0, 3, t);
  job.AddAll();
  std::atomic<int> timeouts{0};
  auto errors = job.RunAll([&](Membership& m) {
    bool straggler = m.self().role == Role::kWorker && m.self().rank == 2;
    if (m.self().role == Role::kWorker && !straggler) {
      try {
        m.Barrier(group::kWorkers);
      } catch (const Timeout& e) {
        ++timeouts;
        EXPECT_NE(std::string(e.what()).find("waiting for: worker 2"), std::string::npos)
            << e.what();
      }
    }
    // The barrier failed; the straggler never asked for it. Later
    // barriers still work.
    m.Finalize();
  });
  for (const auto& e : errors) EXPECT_EQ(e, nullptr) << What(e);
  EXPECT_EQ(timeouts.load(), 2);
}

TEST(Cluster, ALateStragglerMeetsMismatchedCountsNotAWrongBarrier) {
  Timings t;
  t.barrier_timeout = milliseconds(300);
  TestJob job(0, 3, t);
  job.AddAll();
  std::atomic<int> errors_seen{0};
  std::atomic<int> mismatches{0};
  auto errors = job.RunAll([&](Membership& m) {
    if (m.self().role == Role::kWorker) {
      bool straggler = m.self().rank == 2;
      if (!straggler) {
        EXPECT_THROW(m.Barrier(group::kWorkers), Timeout);  // #1 times out without worker 2
      } else {
        std::this_thread::sleep_for(milliseconds(600));
      }
      // Now the others are at #2 and the straggler at #1: the scheduler must
      // not pair them.
      try {
        m.Barrier(group::kWorkers);
      } catch (const Error& e) {
        ++errors_seen;
        if (std::string(e.what()).find("is at barrier #") != std::string::npos) ++mismatches;
      }
    }
    m.Finalize();
  });
  for (const auto& e : errors) EXPECT_EQ(e, nullptr) << What(e);
  EXPECT_EQ(errors_seen.load(), 3);
  EXPECT_GE(mismatches.load(), 2);
}

TEST(Cluster, BarrierOutsideOwnGroupIsInvalid) {
  TestJob job(1, 1);
  job.AddAll();
  auto errors = job.RunAll([](Membership& m) {
    if (m.self().role == Role::kServer) {
      EXPECT_THROW(m.Barrier(group::kWorkers), InvalidArgument);
      EXPECT_THROW(m.Barrier(0), InvalidArgument);
      EXPECT_THROW(m.Barrier(8), InvalidArgument);
    }
    m.Finalize();
  });
  for (const auto& e : errors) EXPECT_EQ(e, nullptr) << What(e);
}

}  // namespace
}  // namespace tandem::cluster
