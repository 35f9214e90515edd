// Elastic collectives (docs/elastic.md, "Elastic collectives"): workers of
// an elastic job (TANDEM_MIN_WORKERS) vanish; the survivors' operations
// raise MembershipChanged instead of hanging or failing the mesh, Regroup
// makes a world over the survivors on the connections already open, and
// the allreduces after it hold exactly the survivors' contributions.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "collective/collective_service.h"
#include "collective_job.h"
#include "tandem/error.h"

namespace tandem::collective {
namespace {

using testing::Buffer;
using testing::CollectiveJob;
using testing::What;

// Rank r's element i in round `round`: integers, so that float sums are
// exact.
double Contribution(int world_rank, int64_t i, int round) {
  return static_cast<double>((world_rank + 1) * (i % 97) + round);
}

struct ElasticCase {
  int workers;
  AllReduceAlgorithm algorithm;
  int per_host;              // 0: a host each
  std::vector<int> leaving;  // in this order, one per change
  bool during;               // true: the first leaves while its allreduce runs
  int64_t count;             // float32 elements per allreduce
};

std::string CaseName(const ::testing::TestParamInfo<ElasticCase>& info) {
  const ElasticCase& c = info.param;
  std::string name = "n" + std::to_string(c.workers) + "_" + AllReduceAlgorithmName(c.algorithm);
  if (c.per_host > 0) name += "_" + std::to_string(c.per_host) + "_per_host";
  name += "_leaving";
  for (int r : c.leaving) name += "_" + std::to_string(r);
  name += c.during ? "_during" : "_between";
  name += "_" + std::to_string(c.count);
  return name;
}

class ElasticCollectives : public ::testing::TestWithParam<ElasticCase> {};

// The workers run rounds 0..kRounds-1 of an allreduce. Worker leaving[k]
// vanishes (its transport shut down, as if the process died) before round
// 2 + 2k, or with `during` while its round-2 allreduce runs. Every
// survivor's operation that cannot complete raises MembershipChanged
// naming the worker; the survivor then regroups, and the survivors agree
// on the round to resume from (the lowest any of them has not completed:
// an operation that was under way when a worker left may have completed on
// some survivors and not on others). Every completed round holds exactly
// the contributions of the members it ran over.
TEST_P(ElasticCollectives, SurvivorsRegroupAndTheirSumsAreExact) {
  const ElasticCase c = GetParam();
  constexpr int kRounds = 7;
  CollectiveSettings settings = testing::TestSettings();
  settings.mesh.min_workers = c.workers - static_cast<int>(c.leaving.size());
  settings.mesh.verdict_wait = std::chrono::seconds(20);
  CollectiveJob job(c.workers, settings, {}, c.per_host,
                    {{"TANDEM_MIN_WORKERS", std::to_string(settings.mesh.min_workers)}});
  std::vector<int> survivors;
  for (int r = 0; r < c.workers; ++r) {
    if (std::find(c.leaving.begin(), c.leaving.end(), r) == c.leaving.end()) survivors.push_back(r);
  }
  std::atomic<int> changes_seen{0};
  job.RunOk([&](int rank, CollectiveService& s) {
    const auto leaves = std::find(c.leaving.begin(), c.leaving.end(), rank);
    const int leave_round =
        leaves == c.leaving.end() ? -1 : 2 + 2 * static_cast<int>(leaves - c.leaving.begin());
    std::vector<int> members;
    for (int r = 0; r < c.workers; ++r) members.push_back(r);
    uint32_t epoch = 0;
    int round = 0;
    int regroups = 0;
    while (round < kRounds) {
      if (rank != c.leaving.front() || !c.during) {
        if (round == leave_round) {
          job.node(rank).transport->Shutdown();  // as if the process died
          return;
        }
      }
      Communicator& world = s.World();
      Buffer b(DType::kF32, c.count);
      for (int64_t i = 0; i < c.count; ++i) b.Set(i, Contribution(rank, i, round));
      ReduceOptions o;
      o.algorithm = c.algorithm;
      o.name = "round";
      std::thread killer;
      if (c.during && rank == c.leaving.front() && round == leave_round) {
        // Leaves while the allreduce runs (or just after, on a fast
        // machine): either way the survivors must not hang.
        killer = std::thread([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          job.node(rank).transport->Shutdown();
        });
      }
      try {
        world.AllReduce(b.view(), b.view(), o);
      } catch (const MembershipChanged& e) {
        if (killer.joinable()) {
          killer.join();
          return;  // the leaving worker itself: gone
        }
        const std::string what = e.what();
        bool names_one = false;
        for (int r : c.leaving) {
          names_one =
              names_one || what.find("worker " + std::to_string(r) + " ") != std::string::npos;
        }
        EXPECT_TRUE(names_one) << "rank " << rank << ": " << what;
        EXPECT_NE(what.find("left the job"), std::string::npos) << what;
        EXPECT_NE(what.find("'round'"), std::string::npos) << what;
        const Members m = s.Regroup();
        ++regroups;
        EXPECT_GT(m.epoch, epoch) << "rank " << rank;
        epoch = m.epoch;
        members = m.workers;
        ASSERT_TRUE(std::find(members.begin(), members.end(), rank) != members.end());
        EXPECT_EQ(s.World().size(), static_cast<int>(members.size()));
        EXPECT_EQ(
            s.World().rank(),
            static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin()));
        // Agree on where to go on: the lowest round a member has not done.
        Buffer next(DType::kI64, 1);
        next.Set(0, round);
        ReduceOptions min;
        min.op = Reduction::kMin;
        min.name = "resume";
        s.World().AllReduce(next.view(), next.view(), min);
        round = static_cast<int>(next.Get(0));
        continue;
      } catch (...) {
        if (killer.joinable()) killer.join();
        if (rank == c.leaving.front() && c.during) return;  // its own loss, seen first
        throw;
      }
      if (killer.joinable()) {
        killer.join();
        return;  // completed just before it left
      }
      for (int64_t i = 0; i < c.count; ++i) {
        double expected = 0;
        for (int r : members) expected += Contribution(r, i, round);
        if (b.Get(i) != expected) {
          ADD_FAILURE() << "rank " << rank << " round " << round << " element " << i << ": got "
                        << b.Get(i) << ", expected " << expected << " over " << members.size()
                        << " members";
          break;
        }
      }
      ++round;
    }
    EXPECT_EQ(members, survivors) << "rank " << rank;
    EXPECT_EQ(regroups, static_cast<int>(c.leaving.size())) << "rank " << rank;
    changes_seen += regroups;
    // Finalize's barrier passes with the survivors only.
    s.World().Barrier({"done", {}});
  });
  EXPECT_EQ(changes_seen.load(), static_cast<int>(survivors.size() * c.leaving.size()));
}

std::vector<ElasticCase> Cases() {
  std::vector<ElasticCase> out;
  for (AllReduceAlgorithm a : {AllReduceAlgorithm::kRing, AllReduceAlgorithm::kHalvingDoubling,
                               AllReduceAlgorithm::kDirect, AllReduceAlgorithm::kRecursiveDoubling,
                               AllReduceAlgorithm::kAuto}) {
    out.push_back({4, a, 0, {3}, false, 1000});
    out.push_back({4, a, 0, {0}, true, 300000});
  }
  out.push_back({3, AllReduceAlgorithm::kRing, 0, {1}, false, 300000});
  out.push_back({5, AllReduceAlgorithm::kRing, 0, {2, 0}, false, 4096});
  out.push_back({5, AllReduceAlgorithm::kAuto, 0, {4, 1}, true, 70000});
  out.push_back({4, AllReduceAlgorithm::kHierarchical, 2, {1}, false, 50000});
  out.push_back({6, AllReduceAlgorithm::kHierarchical, 2, {5}, true, 300000});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Changes, ElasticCollectives, ::testing::ValuesIn(Cases()), CaseName);

// A group made before a change is retired with the world, even without the
// worker that left; a group naming that worker is refused afterwards; and a
// loss that leaves fewer than TANDEM_MIN_WORKERS fails the job at once, as in
// a fixed one, when TANDEM_ELASTIC_TIMEOUT=0 (PeerLost, not
// MembershipChanged).
TEST(ElasticCollectivesGroups, OldGroupsRetireNewOnesRefuseTheLeaverAndBelowMinimumFails) {
  CollectiveSettings settings = testing::TestSettings();
  settings.mesh.min_workers = 3;
  CollectiveJob job(5, settings, {}, 0,
                    {{"TANDEM_MIN_WORKERS", "3"}, {"TANDEM_ELASTIC_TIMEOUT", "0"}});
  job.RunOk([&](int rank, CollectiveService& s) {
    std::unique_ptr<Communicator> low;
    if (rank <= 1) low = s.NewGroup({0, 1});
    // A barrier through the scheduler: worker 4 leaves after every worker
    // passed it (a collective barrier may still be completing elsewhere).
    EXPECT_EQ(s.Regroup().epoch, 0u);
    if (rank == 4) {
      job.node(rank).transport->Shutdown();
      return;
    }
    Buffer b(DType::kF32, 10);
    EXPECT_THROW(s.World().AllReduce(b.view(), b.view(), {}), MembershipChanged) << rank;
    if (low) {
      // Worker 4 was never in it; it is retired all the same.
      try {
        low->AllReduce(b.view(), b.view(), {});
        ADD_FAILURE() << "rank " << rank << ": a group made before the change still runs";
      } catch (const MembershipChanged& e) {
        EXPECT_NE(std::string(e.what()).find("worker 4 "), std::string::npos) << e.what();
      }
    }
    const Members m = s.Regroup();
    EXPECT_EQ(m.workers, (std::vector<int>{0, 1, 2, 3}));
    try {
      s.NewGroup({rank, 4});
      ADD_FAILURE() << "rank " << rank << ": a group with the worker that left was made";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("worker 4 left the job"), std::string::npos) << e.what();
    }
    if (rank <= 1) {
      auto again = s.NewGroup({0, 1});
      Buffer g(DType::kI64, 3);
      for (int i = 0; i < 3; ++i) g.Set(i, rank + 1);
      again->AllReduce(g.view(), g.view(), {});
      EXPECT_EQ(g.Get(2), 3.0);
    }
    // Without a change, a regroup is a barrier: the world stays.
    Communicator* before = &s.World();
    EXPECT_EQ(s.Regroup().epoch, 1u);
    EXPECT_EQ(&s.World(), before);
    if (rank == 3) {
      job.node(rank).transport->Shutdown();  // 3 remain: the minimum
      return;
    }
    // Worker 3 never joins this one: it raises, on every survivor.
    EXPECT_THROW(s.World().AllReduce(b.view(), b.view(), {}), MembershipChanged) << rank;
    EXPECT_EQ(s.Regroup().workers, (std::vector<int>{0, 1, 2}));
    if (rank == 2) {
      job.node(rank).transport->Shutdown();  // 2 would remain: below it
      return;
    }
    try {
      Buffer x(DType::kF32, 10);
      s.World().AllReduce(x.view(), x.view(), {});
      ADD_FAILURE() << "rank " << rank << ": an allreduce passed without worker 2";
    } catch (const MembershipChanged& e) {
      ADD_FAILURE() << "rank " << rank << ": below the minimum, got a change: " << e.what();
    } catch (const PeerLost& e) {
      EXPECT_NE(std::string(e.what()).find("minimum"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("TANDEM_ELASTIC_TIMEOUT=0 waits for no new worker"),
                std::string::npos)
          << e.what();
    }
  });
}

// Below the minimum the survivors' regroup waits for workers to join, up to
// TANDEM_ELASTIC_TIMEOUT; when none comes the job fails on every survivor
// with PeerLost naming the loss, the minimum and the time-out, not before
// the time-out.
TEST(ElasticCollectivesGroups, BelowTheMinimumTheRegroupWaitsThenFailsNamingTheTimeout) {
  CollectiveSettings settings = testing::TestSettings();
  settings.mesh.min_workers = 3;
  CollectiveJob job(4, settings, {}, 0,
                    {{"TANDEM_MIN_WORKERS", "3"}, {"TANDEM_ELASTIC_TIMEOUT", "1.5"}});
  job.RunOk([&](int rank, CollectiveService& s) {
    EXPECT_EQ(s.Regroup().epoch, 0u);
    if (rank >= 2) {
      job.node(rank).transport->Shutdown();  // 2 remain, below 3
      return;
    }
    Buffer b(DType::kF32, 10);
    EXPECT_THROW(s.World().AllReduce(b.view(), b.view(), {}), MembershipChanged) << rank;
    const auto since = std::chrono::steady_clock::now();
    try {
      s.Regroup();
      ADD_FAILURE() << "rank " << rank << ": a regroup below the minimum passed";
    } catch (const PeerLost& e) {
      const std::string what = e.what();
      EXPECT_GE(std::chrono::steady_clock::now() - since, std::chrono::milliseconds(1000)) << what;
      EXPECT_NE(what.find("2 of 4 workers remained, below the minimum of 3"), std::string::npos)
          << what;
      EXPECT_NE(what.find("no worker joined within 2 s (TANDEM_ELASTIC_TIMEOUT)"),
                std::string::npos)
          << what;
    }
  });
  EXPECT_NE(job.scheduler().scheduler->failure(), std::nullopt);
}

}  // namespace
}  // namespace tandem::collective
