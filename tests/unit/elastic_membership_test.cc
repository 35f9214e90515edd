// Elastic membership (docs/elastic.md) with every node of a job as threads
// in one process over the in-process transport: with TANDEM_MIN_WORKERS a
// lost worker leaves the job and the others go on (a new epoch, the
// remaining ranks, barriers without it), until a loss would leave fewer than
// the minimum, which fails the job as before.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
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

struct ElasticCase {
  int servers;
  int workers;
  int min_workers;
  std::vector<int> leaving;  // worker ranks that vanish, in this order
};

std::string CaseName(const ::testing::TestParamInfo<ElasticCase>& info) {
  std::string name = "S" + std::to_string(info.param.servers) + "W" +
                     std::to_string(info.param.workers) + "Min" +
                     std::to_string(info.param.min_workers) + "Leaving";
  for (int r : info.param.leaving) name += std::to_string(r);
  return name;
}

class ElasticMembership : public ::testing::TestWithParam<ElasticCase> {};

// Workers in `leaving` vanish one after another (each once the previous
// change reached every node); the others pass barriers before, between and
// after the changes, and Finalize.
TEST_P(ElasticMembership, LostWorkersLeaveAndTheOthersGoOn) {
  const ElasticCase c = GetParam();
  TestJob job(c.servers, c.workers, {}, nullptr,
              {{"TANDEM_MIN_WORKERS", std::to_string(c.min_workers)}});
  job.AddAll();
  const size_t nodes = static_cast<size_t>(c.servers + c.workers);
  std::mutex mu;
  std::vector<std::vector<uint32_t>> heard(nodes);  // epochs each node's listener heard
  for (size_t i = 0; i < nodes; ++i) {
    job.node(i).membership->AddWorkerLeftListener([&, i](const WorkerLeftNotice& n) {
      std::lock_guard lock(mu);
      heard[i].push_back(n.epoch);
    });
  }
  auto epoch_everywhere = [&](uint32_t epoch) {
    return WaitFor([&] {
      for (size_t i = 0; i < nodes; ++i) {
        const auto& self = job.node(i).membership->self();
        bool gone = self.role == Role::kWorker &&
                    std::find(c.leaving.begin(), c.leaving.end(), self.rank) != c.leaving.end();
        if (!gone && job.node(i).membership->epoch() < epoch) return false;
      }
      return true;
    });
  };
  auto errors = job.RunAll([&](Membership& m) {
    m.Barrier(group::kAll);
    for (size_t step = 0; step < c.leaving.size(); ++step) {
      if (m.self().role == Role::kWorker && m.self().rank == c.leaving[step]) {
        m.Close();
        return;
      }
      ASSERT_TRUE(epoch_everywhere(static_cast<uint32_t>(step + 1)));
      if (m.self().role != Role::kScheduler) m.Barrier(group::kWorkers | group::kServers);
    }
    m.Finalize();
  });
  for (size_t i = 0; i < errors.size(); ++i) EXPECT_EQ(errors[i], nullptr) << What(errors[i]);
  std::vector<int> remaining;
  for (int r = 0; r < c.workers; ++r) {
    if (std::find(c.leaving.begin(), c.leaving.end(), r) == c.leaving.end()) remaining.push_back(r);
  }
  const auto epochs = static_cast<uint32_t>(c.leaving.size());
  EXPECT_EQ(job.scheduler().scheduler->epoch(), epochs);
  EXPECT_FALSE(job.scheduler().scheduler->failure().has_value());
  std::vector<uint32_t> in_order;
  for (uint32_t e = 1; e <= epochs; ++e) in_order.push_back(e);
  for (size_t i = 0; i < nodes; ++i) {
    Membership& m = *job.node(i).membership;
    if (m.self().role == Role::kWorker &&
        std::find(c.leaving.begin(), c.leaving.end(), m.self().rank) != c.leaving.end()) {
      continue;
    }
    EXPECT_EQ(m.epoch(), epochs) << m.self().ToString();
    EXPECT_EQ(m.workers(), remaining) << m.self().ToString();
    EXPECT_EQ(m.num_workers(), static_cast<int>(remaining.size()));
    EXPECT_EQ(heard[i], in_order) << m.self().ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(Changes, ElasticMembership,
                         ::testing::Values(ElasticCase{0, 2, 1, {1}}, ElasticCase{1, 3, 2, {1}},
                                           ElasticCase{0, 3, 2, {0}}, ElasticCase{2, 4, 2, {3, 0}},
                                           ElasticCase{1, 5, 1, {4, 2, 1, 0}}),
                         CaseName);

// A loss that would leave fewer workers than the minimum fails a job with
// servers at once (workers cannot join it, so it waits for none), on every
// node, naming the worker and the minimum.
TEST(ElasticMembershipLimits, ALossBelowTheMinimumFailsTheJob) {
  TestJob job(1, 3, {}, nullptr, {{"TANDEM_MIN_WORKERS", "2"}});
  job.AddAll();
  auto errors = job.RunAll([&](Membership& m) {
    m.Barrier(group::kAll);
    if (m.self().role == Role::kWorker && m.self().rank == 2) {
      m.Close();
      return;
    }
    ASSERT_TRUE(WaitFor([&] { return m.epoch() == 1; }));
    if (m.self().role == Role::kWorker && m.self().rank == 0) {
      m.Close();
      return;
    }
    m.Barrier(group::kAll);  // worker 0 never arrives
  });
  int failed = 0;
  for (const auto& e : errors) {
    if (e == nullptr) continue;  // the two that left
    ++failed;
    EXPECT_TRUE(Is<PeerLost>(e)) << What(e);
    EXPECT_NE(What(e).find("lost worker 0"), std::string::npos) << What(e);
    EXPECT_NE(What(e).find("1 worker(s) would remain, below the minimum of 2"), std::string::npos)
        << What(e);
    // The workers that could come would have nowhere to go: no waiting.
    EXPECT_NE(What(e).find("a job with servers cannot wait for new workers"), std::string::npos)
        << What(e);
  }
  EXPECT_EQ(failed, 3);  // the server, worker 1, the scheduler's node
  EXPECT_EQ(job.scheduler().scheduler->epoch(), 1U);
}

// A barrier that waits only for the worker that vanishes completes with the
// others, and without the minimum set nothing changes: a lost worker fails
// the job.
TEST(ElasticMembershipLimits, ABarrierWaitingForTheLostWorkerCompletes) {
  TestJob job(1, 3, {}, nullptr, {{"TANDEM_MIN_WORKERS", "1"}});
  job.AddAll();
  auto errors = job.RunAll([&](Membership& m) {
    if (m.self().role == Role::kWorker && m.self().rank == 1) {
      // Every other node (scheduler, server, 2 workers) waits in the barrier.
      ASSERT_TRUE(WaitFor([&] { return job.scheduler().scheduler->AtBarrier(group::kAll) == 4; }));
      m.Close();
      return;
    }
    m.Barrier(group::kAll);
    EXPECT_EQ(m.epoch(), 1U);
    m.Finalize();
  });
  for (const auto& e : errors) EXPECT_EQ(e, nullptr) << What(e);
}

TEST(ElasticMembershipLimits, WithoutTheMinimumALostWorkerFailsTheJob) {
  for (const char* min : {"0", "3"}) {  // unset, and equal to the worker count
    TestJob job(0, 3, {}, nullptr, {{"TANDEM_MIN_WORKERS", min}});
    job.AddAll();
    auto errors = job.RunAll([&](Membership& m) {
      m.Barrier(group::kAll);
      if (m.self().role == Role::kWorker && m.self().rank == 1) {
        m.Close();
        return;
      }
      m.Barrier(group::kAll);
    });
    int failed = 0;
    for (const auto& e : errors) {
      if (e == nullptr) continue;
      ++failed;
      EXPECT_TRUE(Is<PeerLost>(e)) << What(e);
      EXPECT_EQ(What(e).find("below the minimum"), std::string::npos) << What(e);
    }
    EXPECT_EQ(failed, 3) << "TANDEM_MIN_WORKERS=" << min;
    EXPECT_EQ(job.scheduler().scheduler->epoch(), 0U);
  }
}

// A barrier returns the members at its release, the same on every node that
// passed it, even when a worker vanishes right after one barrier and the
// notice races the next: what an elastic program re-shards by.
class ElasticMembershipBarriers : public ::testing::TestWithParam<int> {};

TEST_P(ElasticMembershipBarriers, EveryNodeGetsTheSameMembersFromABarrier) {
  constexpr int kWorkers = 4;
  constexpr int kBarriers = 12;
  const int leave_after = GetParam();  // worker 3 leaves after this barrier, worker 2 two later
  TestJob job(1, kWorkers, {}, nullptr, {{"TANDEM_MIN_WORKERS", "1"}});
  job.AddAll();
  const size_t nodes = 2 + kWorkers;             // the scheduler's, the server, the workers
  std::vector<std::vector<Members>> got(nodes);  // per node, per barrier passed
  auto errors = job.RunAll([&](Membership& m) {
    const bool worker = m.self().role == Role::kWorker;
    const size_t index =
        static_cast<size_t>(worker ? 2 + m.self().rank : (m.self().role == Role::kServer ? 1 : 0));
    for (int b = 0; b < kBarriers; ++b) {
      got[index].push_back(m.Barrier(group::kAll));
      if (worker && ((m.self().rank == 3 && b == leave_after) ||
                     (m.self().rank == 2 && b == leave_after + 2))) {
        m.Close();
        return;
      }
    }
    m.Finalize();
  });
  for (const auto& e : errors) EXPECT_EQ(e, nullptr) << What(e);
  // The scheduler's node and the server pass every barrier.
  ASSERT_EQ(got[0].size(), static_cast<size_t>(kBarriers));
  ASSERT_EQ(got[1].size(), static_cast<size_t>(kBarriers));
  for (size_t i = 1; i < nodes; ++i) {
    for (size_t b = 0; b < got[i].size(); ++b) {
      EXPECT_EQ(got[i][b], got[0][b])
          << "node index " << i << ", barrier " << b << ": epoch " << got[i][b].epoch
          << " against the scheduler's node's " << got[0][b].epoch;
    }
  }
  EXPECT_EQ(got[0].front(), (Members{0, {0, 1, 2, 3}}));
  EXPECT_EQ(got[0].back(), (Members{2, {0, 1}}));
  // The epochs never go back from one barrier to the next.
  for (size_t b = 1; b < got[0].size(); ++b) EXPECT_GE(got[0][b].epoch, got[0][b - 1].epoch);
}

INSTANTIATE_TEST_SUITE_P(LeavingAfter, ElasticMembershipBarriers, ::testing::Values(0, 3, 7));

// The notice's decoder refuses what a scheduler never sends.
TEST(WorkerLeftNoticeCodec, RoundTripsAndRefusesInconsistentNotices) {
  WorkerLeftNotice n;
  n.epoch = 2;
  n.node.id = 5;
  n.node.role = Role::kWorker;
  n.node.rank = 3;
  n.node.host = "127.0.0.7";
  n.node.port = 4321;
  n.reason = "its connection closed (reset)";
  n.remaining = {0, 1, 4};
  WorkerLeftNotice back = WorkerLeftNotice::Decode(n.Encode());
  EXPECT_EQ(back.epoch, 2U);
  EXPECT_EQ(back.node.ToString(), n.node.ToString());
  EXPECT_EQ(back.reason, n.reason);
  EXPECT_EQ(back.remaining, n.remaining);

  testing::ExpectDecodeRefuses<WorkerLeftNotice>(
      n, {
             {"epoch 0", [](WorkerLeftNotice& x) { x.epoch = 0; }, "epoch 0"},
             {"a server", [](WorkerLeftNotice& x) { x.node.role = Role::kServer; }, "not a worker"},
             {"nobody remains", [](WorkerLeftNotice& x) { x.remaining.clear(); }, "0 remaining"},
             {"out of order",
              [](WorkerLeftNotice& x) {
                x.remaining = {1, 0};
              },
              "out of order"},
             {"the leaver remains",
              [](WorkerLeftNotice& x) {
                x.remaining = {0, 3};
              },
              "out of order"},
         });
  std::string truncated = n.Encode();
  truncated.pop_back();
  EXPECT_THROW(WorkerLeftNotice::Decode(truncated), ProtocolError);
}

}  // namespace
}  // namespace tandem::cluster
