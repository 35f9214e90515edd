// The membership protocol with every node of a job as threads in one
// process over the in-process transport: formation, ranks, barriers, lost
// nodes, timeouts. The time-outs run on a manual clock the test advances
// (support/manual_time.h), so no test waits for them in real time.
#include <gtest/gtest.h>

#include <algorithm>
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
#include "support/inproc_job.h"
#include "support/manual_time.h"
#include "tandem/error.h"

namespace tandem::cluster {
namespace {

using std::chrono::milliseconds;
using testing::Is;
using testing::TestJob;
using testing::TestNode;
using testing::Timings;
using testing::WaitFor;
using testing::What;

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
  const int masks[] = {group::kAll,
                       group::kWorkers,
                       group::kServers | group::kWorkers,
                       group::kScheduler | group::kWorkers,
                       group::kScheduler,
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
  base::ManualClock clock;
  Timings t;
  t.start_timeout = milliseconds(400);
  TestJob job(1, 2, t, &clock);
  job.Add(Role::kWorker);  // the server and one worker never come
  // Once the scheduler's own node and the worker registered, the clock
  // passes the start time-out (and not the nodes' own backstop, which is
  // the start time-out plus the heartbeat time-out).
  std::thread driver([&] {
    EXPECT_TRUE(WaitFor([&] { return job.scheduler().scheduler->Registered() == 2; }));
    clock.Advance(t.start_timeout + milliseconds(1));
  });
  auto errors = job.RunAll([](Membership& m) { m.Finalize(); });
  driver.join();
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

TEST(Cluster, FailureListenersHearTheLostNodeOnce) {
  TestJob job(0, 3);
  job.AddAll();
  std::vector<std::atomic<int>> calls(3);
  std::vector<std::string> texts(3);
  for (size_t i = 0; i < 3; ++i) {
    job.node(i).services().membership.AddFailureListener(
        [&, i](const std::string& text, const std::exception_ptr&) {
          calls[i]++;
          texts[i] = text;
        });
  }
  auto errors = job.RunAll([](Membership& m) {
    m.Barrier(group::kAll);
    if (m.self().role == Role::kWorker && m.self().rank == 2) {
      m.Close();
      return;
    }
    m.Barrier(group::kAll);
  });
  int heard = 0;
  for (size_t i = 0; i < 3; ++i) {
    if (job.node(i).membership->self().rank == 2) {
      EXPECT_EQ(calls[i], 0);
      continue;
    }
    ++heard;
    EXPECT_EQ(calls[i], 1) << "node " << i;
    EXPECT_NE(texts[i].find("lost worker 2"), std::string::npos) << texts[i];
  }
  EXPECT_EQ(heard, 2);
  // A listener added after the failure hears it at once.
  size_t survivor = job.node(0).membership->self().rank == 2 ? 1 : 0;
  std::string late;
  job.node(survivor).membership->AddFailureListener(
      [&](const std::string& t, const std::exception_ptr&) { late = t; });
  EXPECT_NE(late.find("lost worker 2"), std::string::npos) << late;
}

// A server that cannot go on stops the job: every node, the server too,
// fails with the server's error kind and text, not with a lost peer.
TEST(Cluster, AStoppedJobFailsEveryNodeWithTheStoppingNodesError) {
  TestJob job(1, 2);
  job.AddAll();
  auto errors = job.RunAll([](Membership& m) {
    m.Barrier(group::kAll);
    if (m.self().role == Role::kServer) {
      m.StopJob(InvalidArgument("optimizer states file /ckpt/kv-optimizer.server0: damaged"));
      // Its own failure arrives with the scheduler's answer, as everyone's.
      for (int i = 0; i < 500; ++i) {
        m.CheckHealth();
        std::this_thread::sleep_for(milliseconds(10));
      }
      return;
    }
    m.Barrier(group::kAll);  // the server never arrives
  });
  ASSERT_EQ(errors.size(), 4U);  // the scheduler's own node too
  for (const auto& e : errors) {
    ASSERT_NE(e, nullptr);
    EXPECT_TRUE(Is<InvalidArgument>(e)) << What(e);
    EXPECT_NE(What(e).find("server 0 (node 1"), std::string::npos) << What(e);
    EXPECT_NE(What(e).find("stopped the job: optimizer states file "
                           "/ckpt/kv-optimizer.server0: damaged"),
              std::string::npos)
        << What(e);
  }
  auto failure = job.scheduler().scheduler->failure();
  ASSERT_TRUE(failure.has_value());
  EXPECT_NE(failure->find("kv-optimizer.server0"), std::string::npos) << *failure;
  // A node asking after the failure changes nothing.
  job.node(0).membership->StopJob(IoError("a later error"));
  EXPECT_EQ(job.scheduler().scheduler->failure(), failure);
}

TEST(Cluster, ASilentNodeIsDeclaredLostAfterTheHeartbeatTimeout) {
  base::ManualClock clock;
  Timings t;
  t.heartbeat_timeout = milliseconds(600);
  TestJob job(0, 2, t, &clock);
  TestNode* beating = job.Add(Role::kWorker, 0);
  Timings mute = t;
  mute.heartbeat_interval = milliseconds(60000);  // never beats
  mute.heartbeat_timeout = milliseconds(120000);
  job.Add(Role::kWorker, 1, &mute);
  std::atomic<int> joined{0};
  // The clock moves one heartbeat interval at a time, and on only once the
  // beating nodes' beats of that interval were answered: their silence
  // never exceeds an interval, while the mute worker's grows by one each
  // step. After the 7th (0.7 s, past the 0.6 s time-out) the clock stands
  // still until the scheduler declared the mute worker lost.
  std::thread driver([&] {
    EXPECT_TRUE(WaitFor([&] { return joined == 3; }));
    const std::vector<Membership*> beaters = {beating->membership, job.scheduler().membership};
    for (int step = 1; step <= 7; ++step) {
      clock.Advance(t.heartbeat_interval);
      EXPECT_TRUE(WaitFor([&] {
        return std::all_of(beaters.begin(), beaters.end(), [&](Membership* m) {
          return m->SinceLastHeard() < t.heartbeat_interval;
        });
      })) << "step "
          << step;
    }
  });
  auto errors = job.RunAll([&](Membership& m) {
    ++joined;
    if (m.self().role == Role::kWorker && m.self().rank == 1) {
      // Stays connected but sends nothing past the scheduler's timeout;
      // then learns of its own loss as a closed connection.
      EXPECT_TRUE(WaitFor([&] {
        try {
          m.CheckHealth();
          return false;
        } catch (const PeerLost&) {
          return true;
        }
      }));
      try {
        m.Finalize();
      } catch (const PeerLost&) {
      }
      return;
    }
    m.Finalize();
  });
  driver.join();
  EXPECT_EQ(errors[1], nullptr);
  for (size_t i : {size_t{0}, size_t{2}}) {
    ASSERT_NE(errors[i], nullptr);
    EXPECT_TRUE(Is<PeerLost>(errors[i])) << What(errors[i]);
    EXPECT_NE(What(errors[i]).find("worker 1"), std::string::npos) << What(errors[i]);
    EXPECT_NE(What(errors[i]).find("no heartbeat for 0.7 s (PS_HEARTBEAT_TIMEOUT=0.6 s)"),
              std::string::npos)
        << What(errors[i]);
  }
}

TEST(Cluster, BarrierTimeoutNamesTheMissingNodes) {
  base::ManualClock clock;
  Timings t;
  t.barrier_timeout = milliseconds(400);
  TestJob job(0, 3, t, &clock);
  job.AddAll();
  // Once workers 0 and 1 wait at the barrier, the clock passes its time-out.
  std::thread driver([&] {
    EXPECT_TRUE(
        WaitFor([&] { return job.scheduler().scheduler->AtBarrier(group::kWorkers) == 2; }));
    clock.Advance(t.barrier_timeout + milliseconds(1));
  });
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
  driver.join();
  for (const auto& e : errors) EXPECT_EQ(e, nullptr) << What(e);
  EXPECT_EQ(timeouts.load(), 2);
}

TEST(Cluster, ALateStragglerMeetsMismatchedCountsNotAWrongBarrier) {
  base::ManualClock clock;
  Timings t;
  t.barrier_timeout = milliseconds(300);
  TestJob job(0, 3, t, &clock);
  job.AddAll();
  Scheduler& scheduler = *job.scheduler().scheduler;
  // Once workers 0 and 1 wait at barrier #1, the clock passes its time-out.
  std::thread driver([&] {
    EXPECT_TRUE(WaitFor([&] { return scheduler.AtBarrier(group::kWorkers) == 2; }));
    clock.Advance(t.barrier_timeout + milliseconds(1));
  });
  std::atomic<int> timed_out{0};
  std::atomic<int> errors_seen{0};
  std::atomic<int> mismatches{0};
  auto errors = job.RunAll([&](Membership& m) {
    if (m.self().role == Role::kWorker) {
      bool straggler = m.self().rank == 2;
      if (!straggler) {
        EXPECT_THROW(m.Barrier(group::kWorkers), Timeout);  // #1 times out without worker 2
        ++timed_out;
      } else {
        // Late: after #1 failed, once the others wait at #2.
        EXPECT_TRUE(
            WaitFor([&] { return timed_out == 2 && scheduler.AtBarrier(group::kWorkers) == 2; }));
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
  driver.join();
  for (const auto& e : errors) EXPECT_EQ(e, nullptr) << What(e);
  EXPECT_EQ(errors_seen.load(), 3);
  EXPECT_EQ(mismatches.load(), 3);
}

// A worker's ordinary barrier over every group never pairs with the
// servers' final barrier (both are their nodes' first barrier over kAll):
// the barrier fails on everyone, naming the final one.
TEST(Cluster, AnOrdinaryBarrierNeverPairsWithFinalize) {
  Timings t;
  t.barrier_timeout = milliseconds(2000);
  TestJob job(1, 1, t);
  job.AddAll();
  std::atomic<int> named_final{0};
  auto errors = job.RunAll([&](Membership& m) {
    if (m.self().role == Role::kWorker) {
      // The others finalize first.
      EXPECT_TRUE(WaitFor([&] { return job.scheduler().scheduler->AtBarrier(group::kAll) == 2; }));
      try {
        m.Barrier(group::kAll);
        ADD_FAILURE() << "the worker's barrier paired with Finalize";
      } catch (const Error& e) {
        if (std::string(e.what()).find("final barrier") != std::string::npos) ++named_final;
      }
      return;
    }
    try {
      m.Finalize();
    } catch (const Error& e) {
      if (std::string(e.what()).find("final barrier") != std::string::npos) ++named_final;
    }
  });
  EXPECT_EQ(named_final.load(), 3);  // the worker, the server and the scheduler
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
