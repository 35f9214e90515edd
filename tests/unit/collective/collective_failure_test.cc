// Failures: a worker that dies (its transport shuts down) makes the pending
// operation and every later one fail with PeerLost naming its rank on every
// other worker, within the time-out; a worker that never shows up makes the
// operation fail with Timeout naming the operation, the tensor and the
// missing rank; nothing hangs.
#include <gtest/gtest.h>

#include <thread>

#include "collective_job.h"

namespace tandem::collective {
namespace {

using testing::Buffer;
using testing::CollectiveJob;
using testing::Is;
using testing::What;
using Clock = std::chrono::steady_clock;

// The third parameter is the waits' polling budget (TANDEM_COLLECTIVE_SPIN_US):
// 0 sleeps at once; 200 ms polls far longer than a piece takes, so the loss
// must end a polling wait too.
class PeerDeath : public ::testing::TestWithParam<
                      std::tuple<int, AllReduceAlgorithm, std::chrono::microseconds>> {};

TEST_P(PeerDeath, PendingAndLaterOperationsRaisePeerLostNamingTheRank) {
  const auto [n, algorithm, spin] = GetParam();
  const int victim = n - 1;
  // The hierarchical allreduce on hosts of 2 ranks (the victim's host-mate
  // and its slice's partners on the other hosts wait for it).
  const int per_host = algorithm == AllReduceAlgorithm::kHierarchical ? 2 : 0;
  CollectiveJob job(n, testing::TestSettings(testing::kTestPatience, 1, 64 << 10, true, spin), {},
                    per_host);
  auto errors = job.Run([&, algorithm = algorithm](int rank, CollectiveService& s) {
    Buffer b(DType::kF32, 100000);
    ReduceOptions o;
    o.algorithm = algorithm;
    o.name = "grad";
    s.World().AllReduce(b.view(), b.view(), o);  // all alive: works
    if (rank == victim) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      job.node(rank).transport->Shutdown();  // as if the process died
      return;
    }
    const auto start = Clock::now();
    try {
      s.World().AllReduce(b.view(), b.view(), o);
      ADD_FAILURE() << "rank " << rank << ": the allreduce succeeded without rank " << victim;
    } catch (const PeerLost& e) {
      const std::string what = e.what();
      // From the mesh ("worker rank 2 (...)") or the scheduler ("worker 2 (node 3, ...)").
      EXPECT_TRUE(what.find("worker rank " + std::to_string(victim) + " ") != std::string::npos ||
                  what.find("worker " + std::to_string(victim) + " ") != std::string::npos)
          << what;
      EXPECT_NE(what.find("grad"), std::string::npos) << what;
    }
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
    // Later operations fail at once, also other kinds.
    EXPECT_THROW(s.World().Barrier(), PeerLost);
    EXPECT_THROW(s.World().Broadcast(b.view(), 0), PeerLost);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], nullptr)
        << "rank " << r << ": " << What(errors[static_cast<size_t>(r)]);
  }
}

std::string PeerDeathName(const ::testing::TestParamInfo<PeerDeath::ParamType>& info) {
  return fmt::format("n{}_{}_spin{}us", std::get<0>(info.param),
                     AllReduceAlgorithmName(std::get<1>(info.param)),
                     std::get<2>(info.param).count());
}

INSTANTIATE_TEST_SUITE_P(Hierarchical, PeerDeath,
                         ::testing::Combine(::testing::Values(6),
                                            ::testing::Values(AllReduceAlgorithm::kHierarchical),
                                            ::testing::Values(std::chrono::microseconds(0),
                                                              std::chrono::microseconds(200000))),
                         PeerDeathName);

INSTANTIATE_TEST_SUITE_P(
    GroupsAndAlgorithms, PeerDeath,
    ::testing::Combine(
        ::testing::Values(2, 3, 5),
        ::testing::Values(AllReduceAlgorithm::kRing, AllReduceAlgorithm::kHalvingDoubling,
                          AllReduceAlgorithm::kDirect, AllReduceAlgorithm::kRecursiveDoubling),
        ::testing::Values(std::chrono::microseconds(0), std::chrono::microseconds(200000))),
    PeerDeathName);

// A job stopped by one process (as a server stops it when it cannot load its
// optimizer states) fails every worker's pending and later collectives with
// that process's error kind and text, not with PeerLost.
TEST(StoppedJob, CollectivesFailWithTheStoppingProcesssKind) {
  const std::string cause = "optimizer states file /ckpt/kv-optimizer.server0: cannot write";
  CollectiveJob job(3, testing::TestSettings(testing::kTestPatience));
  auto errors = job.Run([&](int rank, CollectiveService& s) {
    Buffer b(DType::kF32, 1000);
    s.World().AllReduce(b.view(), b.view(), {});  // all alive: works
    if (rank == 2) {
      job.node(rank).membership->StopJob(IoError(cause));
      return;
    }
    const auto start = Clock::now();
    // Rank 2 never joins this one: the stop must end it.
    EXPECT_THROW(s.World().AllReduce(b.view(), b.view(), {}), IoError) << "rank " << rank;
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
    try {
      s.World().Barrier();
      ADD_FAILURE() << "rank " << rank << ": a barrier passed after the job stopped";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(cause), std::string::npos) << e.what();
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], nullptr)
        << "rank " << r << ": " << What(errors[static_cast<size_t>(r)]);
  }
}

// With a polling budget (1 s) longer than the operation's time-out (300 ms),
// the time-out still ends the wait.
class CollectiveTimeout : public ::testing::TestWithParam<std::chrono::microseconds> {};

TEST_P(CollectiveTimeout, AnAbsentRankIsNamedWithTheOperationAndTensor) {
  CollectiveJob job(3,
                    testing::TestSettings(testing::kTestPatience, 1, 64 << 10, true, GetParam()));
  job.RunOk([&](int rank, CollectiveService& s) {
    if (rank == 2) {
      // Never joins the operation; waits until the others gave up.
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
      return;
    }
    Buffer b(DType::kI64, 1000);
    ReduceOptions o;
    o.name = "layer7.bias";
    o.timeout = std::chrono::milliseconds(300);
    o.algorithm = AllReduceAlgorithm::kDirect;
    const auto start = Clock::now();
    try {
      s.World().AllReduce(b.view(), b.view(), o);
      ADD_FAILURE() << "no timeout";
    } catch (const Timeout& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("AllReduce"), std::string::npos) << what;
      EXPECT_NE(what.find("layer7.bias"), std::string::npos) << what;
      EXPECT_NE(what.find("group rank(s) 2"), std::string::npos) << what;
    }
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  });
}

INSTANTIATE_TEST_SUITE_P(Spin, CollectiveTimeout,
                         ::testing::Values(std::chrono::microseconds(0),
                                           std::chrono::microseconds(1000000)),
                         [](const auto& info) {
                           return fmt::format("spin{}us", info.param.count());
                         });

// Ranks that disagree on a call's size (or anything else) are the call
// checks' (call_check_test.cc).

}  // namespace
}  // namespace tandem::collective
