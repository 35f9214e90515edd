// Workers joining a running elastic job (docs/elastic.md, "Workers that
// join"), with every node as a thread over the in-process transport: a
// worker that registers after the job formed waits until a place is free
// and the workers regroup (a barrier over the workers with the admit flag),
// then takes the departed worker's place (node id and rank) at a new epoch;
// its barriers count on from the others'. What cannot join is refused,
// naming why.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "cluster/cluster_messages.h"
#include "cluster/membership.h"
#include "cluster/scheduler.h"
#include "support/decode_refusals.h"
#include "support/inproc_job.h"
#include "support/manual_time.h"
#include "tandem/error.h"

namespace tandem::cluster {
namespace {

using testing::Is;
using testing::TestJob;
using testing::WaitFor;
using testing::What;

class ElasticJoins : public ::testing::TestWithParam<int> {};

// Worker `leaver` of 3 vanishes; a new worker registers and waits; a plain
// barrier of the workers does not admit it, a regroup's does; then it is a
// member like the others until Finalize.
TEST_P(ElasticJoins, AWorkerTakesTheDepartedPlaceAtARegroup) {
  const int leaver = GetParam();
  TestJob job(0, 3, {}, nullptr, {{"TANDEM_MIN_WORKERS", "2"}});
  job.AddAll();
  testing::TestNode* joiner = job.AddLate(Role::kWorker, "joiner-host");
  std::mutex mu;
  std::vector<WorkerJoinedNotice> heard;
  for (size_t i = 0; i < 3; ++i) {
    job.node(i).membership->AddWorkerJoinedListener([&](const WorkerJoinedNotice& n) {
      std::lock_guard lock(mu);
      heard.push_back(n);
    });
  }
  const std::vector<int> all = {0, 1, 2};
  std::vector<int> survivors = all;
  std::erase(survivors, leaver);
  int leaver_id = -1;
  std::atomic<int> departed{0};

  auto joined = std::async(std::launch::async, [&]() -> std::exception_ptr {
    try {
      if (!WaitFor([&] { return departed.load() >= 1; })) throw Timeout("no departure");
      Membership& m = *joiner->membership;
      joiner->node->Join();
      EXPECT_TRUE(m.joined_running_job());
      EXPECT_EQ(m.self().rank, leaver);
      EXPECT_EQ(m.self().id, leaver_id);
      EXPECT_EQ(m.self().host, "joiner-host");
      EXPECT_EQ(m.epoch(), 2U);
      EXPECT_EQ(m.admission_epoch(), 2U);
      EXPECT_EQ(m.workers(), all);
      const Members next = m.Barrier(group::kWorkers);  // the others' next one
      EXPECT_EQ(next.epoch, 2U);
      EXPECT_EQ(next.workers, all);
      m.Finalize();
      return nullptr;
    } catch (...) {
      return std::current_exception();
    }
  });

  auto errors = job.RunAll([&](Membership& m) {
    m.Barrier(group::kAll);
    if (m.self().role == Role::kScheduler) {
      m.Finalize();  // its final barrier is open when the worker joins
      return;
    }
    if (m.self().rank == leaver) {
      leaver_id = m.self().id;
      m.Close();
      return;
    }
    ASSERT_TRUE(WaitFor([&] { return m.epoch() == 1; }));
    ++departed;
    // Held back until the workers regroup: a barrier without the flag is
    // not a regroup.
    ASSERT_TRUE(WaitFor([&] { return m.joiners_waiting() == 1; }));
    const Members plain = m.Barrier(group::kWorkers);
    EXPECT_EQ(plain.epoch, 1U);
    EXPECT_EQ(plain.workers, survivors);
    EXPECT_EQ(job.scheduler().scheduler->Joiners(), 1U);
    const Members regroup = m.Barrier(group::kWorkers, false, /*admit=*/true);
    EXPECT_EQ(regroup.epoch, 2U);
    EXPECT_EQ(regroup.workers, all);
    EXPECT_EQ(m.joiners_waiting(), 0U);
    EXPECT_EQ(m.worker(leaver).host, "joiner-host");
    const Members next = m.Barrier(group::kWorkers);
    EXPECT_EQ(next.epoch, 2U);
    EXPECT_EQ(next.workers, all);
    m.Finalize();
  });
  for (const auto& e : errors) EXPECT_EQ(e, nullptr) << What(e);
  std::exception_ptr joiner_error = joined.get();
  EXPECT_EQ(joiner_error, nullptr) << What(joiner_error);
  EXPECT_EQ(job.scheduler().scheduler->epoch(), 2U);
  EXPECT_EQ(job.scheduler().scheduler->Joiners(), 0U);
  EXPECT_FALSE(job.scheduler().scheduler->failure().has_value());
  std::lock_guard lock(mu);
  ASSERT_EQ(heard.size(), 2U);  // each survivor once
  for (const auto& n : heard) {
    EXPECT_EQ(n.epoch, 2U);
    EXPECT_EQ(n.node.rank, leaver);
    EXPECT_EQ(n.node.id, leaver_id);
    EXPECT_EQ(n.node.host, "joiner-host");
    EXPECT_EQ(n.workers, all);
  }
}

// Below the minimum (2 of 3 workers lost, TANDEM_MIN_WORKERS=2) the job
// waits: a plain barrier still passes, the survivors' regroup is held
// until a worker registers, and that regroup admits it, back at the
// minimum.
TEST(ElasticJoinsBelowTheMinimum, TheRegroupWaitsForAWorkerToJoin) {
  TestJob job(0, 3, {}, nullptr, {{"TANDEM_MIN_WORKERS", "2"}});
  job.AddAll();
  testing::TestNode* joiner = job.AddLate(Role::kWorker, "joiner-host");
  std::atomic<bool> held{false};
  auto joined = std::async(std::launch::async, [&]() -> std::exception_ptr {
    try {
      if (!WaitFor([&] { return held.load(); })) throw Timeout("the regroup was never held");
      Membership& m = *joiner->membership;
      joiner->node->Join();
      EXPECT_EQ(m.self().rank, 1);  // the lowest departed place
      EXPECT_EQ(m.epoch(), 3U);
      EXPECT_EQ(m.workers(), (std::vector<int>{0, 1}));
      m.Finalize();
      return nullptr;
    } catch (...) {
      return std::current_exception();
    }
  });
  auto errors = job.RunAll([&](Membership& m) {
    m.Barrier(group::kAll);
    if (m.self().role == Role::kScheduler) {
      m.Finalize();
      return;
    }
    if (m.self().rank != 0) {
      m.Close();
      return;
    }
    ASSERT_TRUE(WaitFor([&] { return m.epoch() == 2; }));
    const Members plain = m.Barrier(group::kWorkers);
    EXPECT_EQ(plain.workers, (std::vector<int>{0}));
    auto regroup = std::async(std::launch::async,
                              [&] { return m.Barrier(group::kWorkers, false, /*admit=*/true); });
    ASSERT_TRUE(
        WaitFor([&] { return job.scheduler().scheduler->AtBarrier(group::kWorkers) == 1; }));
    // Every member arrived, and still it waits: nobody to admit yet.
    EXPECT_EQ(regroup.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
    held = true;
    const Members after = regroup.get();
    EXPECT_EQ(after.epoch, 3U);
    EXPECT_EQ(after.workers, (std::vector<int>{0, 1}));
    m.Finalize();
  });
  for (const auto& e : errors) EXPECT_EQ(e, nullptr) << What(e);
  std::exception_ptr joiner_error = joined.get();
  EXPECT_EQ(joiner_error, nullptr) << What(joiner_error);
  EXPECT_FALSE(job.scheduler().scheduler->failure().has_value());
}

INSTANTIATE_TEST_SUITE_P(Leaver, ElasticJoins, ::testing::Values(0, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "worker_" + std::to_string(info.param) + "_replaced";
                         });

struct RefusedJoin {
  std::string label;
  int servers;
  int workers;
  std::string min_workers;
  int leaving;   // the worker rank that vanishes first; -1: none
  Role role;     // of the process that tries to join
  bool timeout;  // Timeout, else ConfigError
  std::string message;
};

class ElasticJoinsRefused : public ::testing::TestWithParam<RefusedJoin> {};

// The job goes on while the late process fails, naming why.
TEST_P(ElasticJoinsRefused, NamingWhy) {
  const RefusedJoin c = GetParam();
  testing::Timings t;
  t.start_timeout = std::chrono::milliseconds(1500);
  TestJob job(c.servers, c.workers, t, nullptr, {{"TANDEM_MIN_WORKERS", c.min_workers}});
  job.AddAll();
  testing::TestNode* late = job.AddLate(c.role, "late-host");
  std::atomic<bool> done{false};
  std::atomic<int> departed{0};
  auto tried = std::async(std::launch::async, [&]() -> std::exception_ptr {
    std::exception_ptr out;
    if (WaitFor([&] { return departed.load() > 0; })) {
      try {
        late->node->Join();
      } catch (...) {
        out = std::current_exception();
      }
    }
    done = true;
    return out;
  });
  auto errors = job.RunAll([&](Membership& m) {
    m.Barrier(group::kAll);
    if (m.self().role == Role::kWorker && m.self().rank == c.leaving) {
      m.Close();
      return;
    }
    if (c.leaving >= 0) ASSERT_TRUE(WaitFor([&] { return m.epoch() == 1; }));
    ++departed;
    ASSERT_TRUE(WaitFor([&] { return done.load(); }));
    m.Finalize();
  });
  for (const auto& e : errors) EXPECT_EQ(e, nullptr) << What(e);
  std::exception_ptr e = tried.get();
  ASSERT_NE(e, nullptr) << "the late " << RoleName(c.role) << " joined";
  if (c.timeout) {
    EXPECT_TRUE(Is<Timeout>(e)) << What(e);
  } else {
    EXPECT_TRUE(Is<ConfigError>(e)) << What(e);
  }
  EXPECT_NE(What(e).find(c.message), std::string::npos) << What(e);
  EXPECT_EQ(job.scheduler().scheduler->Joiners(), 0U);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ElasticJoinsRefused,
    ::testing::Values(RefusedJoin{"job_with_servers", 1, 3, "2", 2, Role::kWorker, false,
                                  "workers join only jobs without servers so far"},
                      RefusedJoin{"fixed_job", 0, 2, "0", -1, Role::kWorker, false,
                                  "is not elastic"},
                      RefusedJoin{"a_server", 1, 3, "2", 1, Role::kServer, false,
                                  "the job has already formed with 1 servers and 3 workers"},
                      RefusedJoin{"no_place_free", 0, 3, "2", -1, Role::kWorker, true,
                                  "no worker left the job to free a place"}),
    [](const ::testing::TestParamInfo<RefusedJoin>& info) { return info.param.label; });

// The decoders refuse what a scheduler never sends.
TEST(WorkerJoinedCodecs, RoundTripAndRefuseInconsistentMessages) {
  WorkerJoinedNotice n;
  n.epoch = 3;
  n.node = NodeInfo{4, Role::kWorker, 2, "127.0.0.9", 4000};
  n.workers = {0, 2, 3};
  WorkerJoinedNotice back = WorkerJoinedNotice::Decode(n.Encode());
  EXPECT_EQ(back.epoch, 3U);
  EXPECT_EQ(back.node.ToString(), n.node.ToString());
  EXPECT_EQ(back.workers, n.workers);
  testing::ExpectDecodeRefuses<WorkerJoinedNotice>(
      n,
      {
          {"epoch 0", [](WorkerJoinedNotice& x) { x.epoch = 0; }, "epoch 0"},
          {"a server", [](WorkerJoinedNotice& x) { x.node.role = Role::kServer; }, "not a worker"},
          {"no members", [](WorkerJoinedNotice& x) { x.workers.clear(); }, "0 workers"},
          {"out of order",
           [](WorkerJoinedNotice& x) {
             x.workers = {2, 0};
           },
           "out of order"},
          {"without the new worker",
           [](WorkerJoinedNotice& x) {
             x.workers = {0, 3};
           },
           "do not include worker 2"},
      });

  Admission a;
  a.table.num_workers = 2;
  a.table.nodes = {NodeInfo{0, Role::kScheduler, 0, "s", 1}, NodeInfo{1, Role::kWorker, 0, "a", 2},
                   NodeInfo{2, Role::kWorker, 1, "b", 3}};
  a.epoch = 2;
  a.workers = {0, 1};
  a.barriers = {{group::kWorkers, 7}, {group::kAll, 1}};
  Admission b = Admission::Decode(a.Encode());
  EXPECT_EQ(b.table.nodes.size(), 3U);
  EXPECT_EQ(b.table.nodes[2].host, "b");
  EXPECT_EQ(b.epoch, 2U);
  EXPECT_EQ(b.workers, a.workers);
  EXPECT_EQ(b.barriers, a.barriers);
  EXPECT_TRUE(b.joined_below_minimum.empty());
  Admission below = a;
  below.joined_below_minimum = {0};
  EXPECT_EQ(Admission::Decode(below.Encode()).joined_below_minimum, std::vector<int32_t>{0});
  below.joined_below_minimum = {1, 0};  // out of order
  EXPECT_THROW(Admission::Decode(below.Encode()), ProtocolError);
  below.joined_below_minimum = {5};  // not a member
  EXPECT_THROW(Admission::Decode(below.Encode()), ProtocolError);
  Admission outside = a;
  outside.workers = {0, 2};
  EXPECT_THROW(Admission::Decode(outside.Encode()), ProtocolError);
  Admission bad_mask = a;
  bad_mask.barriers = {{0, 1}};
  EXPECT_THROW(Admission::Decode(bad_mask.Encode()), ProtocolError);
  std::string truncated = a.Encode();
  truncated.pop_back();
  EXPECT_THROW(Admission::Decode(truncated), ProtocolError);
}

}  // namespace
}  // namespace tandem::cluster
