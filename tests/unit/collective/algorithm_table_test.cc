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

}  // namespace
}  // namespace tandem::collective
