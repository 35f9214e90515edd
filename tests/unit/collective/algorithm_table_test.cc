// The allreduce selection table: its rows per path (TCP, same-host copy),
// and the precedence of a call's request over TANDEM_ALLREDUCE_ALGORITHM
// over the rows (docs/collectives.md, "The selection table").
#include "collective/algorithm_table.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>

#include "tandem/error.h"

namespace tandem::collective {
namespace {

using Path = AlgorithmTable::Path;
constexpr auto kRing = AllReduceAlgorithm::kRing;
constexpr auto kHd = AllReduceAlgorithm::kHalvingDoubling;
constexpr auto kDirect = AllReduceAlgorithm::kDirect;
constexpr auto kRd = AllReduceAlgorithm::kRecursiveDoubling;
constexpr auto kHier = AllReduceAlgorithm::kHierarchical;

// (bytes, group size, path, expected)
class AlgorithmTableRows
    : public ::testing::TestWithParam<std::tuple<size_t, int, Path, AllReduceAlgorithm>> {};

TEST_P(AlgorithmTableRows, PicksTheMeasuredAlgorithm) {
  const auto [bytes, group, path, expected] = GetParam();
  AlgorithmTable table = AlgorithmTable::FromEnvironment(base::Environment());
  EXPECT_EQ(table.Choose(bytes, group, AllReduceAlgorithm::kAuto, path), expected)
      << bytes << " bytes, " << group << " ranks, "
      << (path == Path::kTcp ? "tcp" : "same-host copy");
}

INSTANTIATE_TEST_SUITE_P(
    Rows, AlgorithmTableRows,
    ::testing::Values(std::make_tuple(size_t{64} << 20, 1, Path::kTcp, kDirect),
                      std::make_tuple(size_t{4} << 10, 2, Path::kTcp, kDirect),
                      std::make_tuple(size_t{16} << 10, 2, Path::kTcp, kDirect),
                      std::make_tuple((size_t{16} << 10) + 1, 2, Path::kTcp, kHd),
                      std::make_tuple(size_t{16} << 10, 3, Path::kTcp, kDirect),
                      std::make_tuple(size_t{1} << 10, 4, Path::kTcp, kRd),
                      std::make_tuple(size_t{4} << 10, 4, Path::kTcp, kRd),
                      std::make_tuple(size_t{16} << 10, 8, Path::kTcp, kRd),
                      std::make_tuple((size_t{16} << 10) + 1, 4, Path::kTcp, kHd),
                      std::make_tuple(size_t{1} << 20, 4, Path::kTcp, kHd),
                      std::make_tuple((size_t{1} << 20) + 1, 4, Path::kTcp, kRing),
                      std::make_tuple(size_t{64} << 20, 8, Path::kTcp, kRing),
                      std::make_tuple(size_t{16} << 10, 16, Path::kTcp, kRd),
                      std::make_tuple((size_t{16} << 10) + 1, 16, Path::kTcp, kHd),
                      std::make_tuple(size_t{64} << 20, 16, Path::kTcp, kRing),
                      std::make_tuple(size_t{64} << 20, 1, Path::kSameHostCopy, kDirect),
                      std::make_tuple(size_t{16} << 10, 4, Path::kSameHostCopy, kDirect),
                      std::make_tuple((size_t{16} << 10) + 1, 4, Path::kSameHostCopy, kHd),
                      std::make_tuple(size_t{64} << 20, 4, Path::kSameHostCopy, kHd),
                      std::make_tuple(size_t{64} << 20, 8, Path::kSameHostCopy, kHd),
                      std::make_tuple(size_t{64} << 20, 16, Path::kSameHostCopy, kRing)));

TEST(AlgorithmTablePrecedence, RequestOverVariableOverRows) {
  AlgorithmTable forced = AlgorithmTable::FromEnvironment(base::Environment(
      std::map<std::string, std::string>{{"TANDEM_ALLREDUCE_ALGORITHM", "ring"}}));
  EXPECT_EQ(forced.Choose(4096, 4, AllReduceAlgorithm::kAuto, Path::kSameHostCopy), kRing);
  EXPECT_EQ(forced.Choose(4096, 4, kHd, Path::kTcp), kHd);
  try {
    AlgorithmTable::FromEnvironment(base::Environment(
        std::map<std::string, std::string>{{"TANDEM_ALLREDUCE_ALGORITHM", "tree"}}));
    FAIL() << "an unknown algorithm was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'tree'"), std::string::npos) << e.what();
  }
}

// (TANDEM_HIERARCHICAL_ALLREDUCE, bytes, hosts, ranks per host, expected):
// auto takes the hierarchical allreduce from kHierarchicalMinBytes among 2
// hosts or more of 2 ranks or more each, 1 at every size, 0 never; one
// host, one rank per host or uneven hosts (per_host 0) keep the rows.
class HierarchicalChoice : public ::testing::TestWithParam<
                               std::tuple<std::string, size_t, int, int, AllReduceAlgorithm>> {};

TEST_P(HierarchicalChoice, FollowsTheVariableAndTheSpread) {
  const auto [setting, bytes, hosts, per_host, expected] = GetParam();
  const AlgorithmTable table = AlgorithmTable::FromEnvironment(base::Environment(
      std::map<std::string, std::string>{{"TANDEM_HIERARCHICAL_ALLREDUCE", setting}}));
  const int group = per_host > 0 ? hosts * per_host : hosts * 2 - 1;
  EXPECT_EQ(table.Choose(bytes, group, AllReduceAlgorithm::kAuto, Path::kTcp,
                         HostSpread{hosts, per_host}),
            expected)
      << setting << ", " << bytes << " bytes, " << hosts << " hosts of " << per_host;
}

constexpr size_t kMin = AlgorithmTable::kHierarchicalMinBytes;
INSTANTIATE_TEST_SUITE_P(Rows, HierarchicalChoice,
                         ::testing::Values(std::make_tuple("auto", kMin, 4, 2, kHier),
                                           std::make_tuple("auto", size_t{64} << 20, 2, 8, kHier),
                                           std::make_tuple("auto", kMin - 1, 4, 2, kHd),
                                           std::make_tuple("auto", size_t{64} << 20, 1, 8, kRing),
                                           std::make_tuple("auto", size_t{64} << 20, 8, 1, kRing),
                                           std::make_tuple("auto", size_t{64} << 20, 3, 0, kRing),
                                           std::make_tuple("1", size_t{4} << 10, 4, 2, kHier),
                                           std::make_tuple("1", size_t{4} << 10, 3, 0, kRd),
                                           std::make_tuple("0", size_t{64} << 20, 4, 2, kRing)));

TEST(AlgorithmTablePrecedence, NamedAlgorithmsOverTheHierarchicalSetting) {
  const AlgorithmTable both =
      AlgorithmTable::FromEnvironment(base::Environment(std::map<std::string, std::string>{
          {"TANDEM_ALLREDUCE_ALGORITHM", "hierarchical"}, {"TANDEM_HIERARCHICAL_ALLREDUCE", "0"}}));
  EXPECT_EQ(both.Choose(4096, 8, AllReduceAlgorithm::kAuto, Path::kTcp, {4, 2}), kHier);
  EXPECT_EQ(both.Choose(4096, 8, kDirect, Path::kTcp, {4, 2}), kDirect);
  // Horovod's variable where tandem's is unset; tandem's wins.
  const AlgorithmTable horovod = AlgorithmTable::FromEnvironment(base::Environment(
      std::map<std::string, std::string>{{"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}}));
  EXPECT_EQ(horovod.Choose(4096, 8, AllReduceAlgorithm::kAuto, Path::kTcp, {4, 2}), kHier);
  const AlgorithmTable tandem_wins =
      AlgorithmTable::FromEnvironment(base::Environment(std::map<std::string, std::string>{
          {"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}, {"TANDEM_HIERARCHICAL_ALLREDUCE", "0"}}));
  EXPECT_EQ(tandem_wins.Choose(4096, 8, AllReduceAlgorithm::kAuto, Path::kTcp, {4, 2}), kRd);
  try {
    AlgorithmTable::FromEnvironment(base::Environment(
        std::map<std::string, std::string>{{"TANDEM_HIERARCHICAL_ALLREDUCE", "yes"}}));
    FAIL() << "an unknown setting was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("TANDEM_HIERARCHICAL_ALLREDUCE='yes'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tandem::collective
