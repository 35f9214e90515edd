// The hierarchical allreduce's waits on hosts of several ranks (its
// results are allreduce_test.cc's "Hierarchical" cases, a dead rank
// collective_failure_test.cc's): who waits for whom shows that only a
// slice's ranks, one per host, exchange across hosts, and an absent rank is
// named within the time-out.
#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "collective_job.h"

namespace tandem::collective {
namespace {

using testing::Buffer;
using testing::CollectiveJob;
using Clock = std::chrono::steady_clock;

// 4 ranks, 2 per host ({0, 1} and {2, 3}); rank 3 never joins. With the
// hierarchical allreduce rank 0 finishes its host's stage with rank 1, then
// waits for its slice's partner on the other host, rank 2 (itself stuck
// waiting for rank 3); the flat ring's rank 0 waits for its left
// neighbour, rank 3. (algorithm, the rank that rank 0, 1 and 2 name)
class HierarchicalWaits
    : public ::testing::TestWithParam<std::tuple<AllReduceAlgorithm, std::map<int, int>>> {};

TEST_P(HierarchicalWaits, AnAbsentRankHoldsUpItsHostAndItsSlicesPartners) {
  const auto [algorithm, named] = GetParam();
  CollectiveJob job(4, testing::TestSettings(), {}, /*per_host=*/2);
  job.RunOk([&, algorithm = algorithm, named = named](int rank, CollectiveService& s) {
    if (rank == 3) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      return;
    }
    Buffer b(DType::kF32, 4096);  // pieces copied, none lent by reference
    ReduceOptions o;
    o.name = "layer2.weight";
    o.timeout = std::chrono::milliseconds(500);
    o.algorithm = algorithm;
    const auto start = Clock::now();
    try {
      s.World().AllReduce(b.view(), b.view(), o);
      ADD_FAILURE() << "rank " << rank << ": no timeout";
    } catch (const Timeout& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("layer2.weight"), std::string::npos) << what;
      EXPECT_NE(
          what.find(fmt::format("group rank(s) {} (worker {})", named.at(rank), named.at(rank))),
          std::string::npos)
          << "rank " << rank << ": " << what;
    }
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  });
}

INSTANTIATE_TEST_SUITE_P(
    Algorithms, HierarchicalWaits,
    ::testing::Values(std::make_tuple(AllReduceAlgorithm::kHierarchical,
                                      std::map<int, int>{{0, 2}, {1, 3}, {2, 3}}),
                      std::make_tuple(AllReduceAlgorithm::kRing,
                                      std::map<int, int>{{0, 3}, {1, 0}, {2, 1}})),
    [](const auto& info) { return AllReduceAlgorithmName(std::get<0>(info.param)); });

}  // namespace
}  // namespace tandem::collective
