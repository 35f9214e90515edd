// Tests of the torchrun/Horovod variables tandem launch gives its workers:
// their placement on hosts and the variables themselves.
#include "launch/worker_variables.h"

#include <gtest/gtest.h>

#include "tandem/error.h"

namespace tandem::launch {
namespace {

struct PlacementCase {
  const char* name;
  std::vector<size_t> process_host;
  size_t first_worker;
  // Per worker: local rank, local size, node rank; node count is shared.
  std::vector<std::tuple<int, int, int>> expected;
  int node_count;
};

class PlaceWorkersTest : public ::testing::TestWithParam<PlacementCase> {};

TEST_P(PlaceWorkersTest, NumbersWorkersAsTorchrunDoes) {
  const auto& c = GetParam();
  const auto placed = PlaceWorkers(c.process_host, c.first_worker);
  ASSERT_EQ(placed.size(), c.expected.size());
  for (size_t w = 0; w < placed.size(); ++w) {
    SCOPED_TRACE("worker " + std::to_string(w));
    EXPECT_EQ(placed[w].rank, static_cast<int>(w));
    EXPECT_EQ(placed[w].world_size, static_cast<int>(c.expected.size()));
    EXPECT_EQ(placed[w].local_rank, std::get<0>(c.expected[w]));
    EXPECT_EQ(placed[w].local_size, std::get<1>(c.expected[w]));
    EXPECT_EQ(placed[w].node_rank, std::get<2>(c.expected[w]));
    EXPECT_EQ(placed[w].node_count, c.node_count);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Placements, PlaceWorkersTest,
    ::testing::Values(
        // tandem launch -n 3 (no scheduler process): all here.
        PlacementCase{"OneHost", {0, 0, 0}, 0, {{0, 3, 0}, {1, 3, 0}, {2, 3, 0}}, 1},
        // scheduler + 1 server on host 0, then 2 workers per host by block.
        PlacementCase{"BlockAfterServices",
                      {0, 0, 0, 0, 1, 1},
                      2,
                      {{0, 2, 0}, {1, 2, 0}, {0, 2, 1}, {1, 2, 1}},
                      2},
        // ssh round robin over slots: hosts alternate.
        PlacementCase{
            "RoundRobin", {0, 0, 1, 0, 1}, 1, {{0, 2, 0}, {0, 2, 1}, {1, 2, 0}, {1, 2, 1}}, 2},
        // Workers only on host 2 and 0: numbered by their first worker.
        PlacementCase{
            "HostsNumberedByFirstWorker", {0, 2, 2, 0}, 1, {{0, 2, 0}, {1, 2, 0}, {0, 1, 1}}, 2}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(PlaceWorkersTest, RefusesAFirstWorkerBeyondTheProcesses) {
  EXPECT_THROW(PlaceWorkers({0, 0}, 2), InvalidArgument);
}

TEST(ContiguousHostsTest, FillsHostsInOrderAndPutsTheRestOnTheLast) {
  EXPECT_EQ(ContiguousHosts({2, 2, 1}, 5), (std::vector<size_t>{0, 0, 1, 1, 2}));
  EXPECT_EQ(ContiguousHosts({2, 1}, 5), (std::vector<size_t>{0, 0, 1, 1, 1}));
  EXPECT_EQ(ContiguousHosts({4}, 2), (std::vector<size_t>{0, 0}));
}

TEST(WorkerVariablesTest, SetsTorchrunsAndHorovodsNames) {
  const auto env = WorkerVariables({3, 8, 1, 4, 1, 2}, "node-a", 29500);
  const std::map<std::string, std::string> expected = {{"RANK", "3"},
                                                       {"WORLD_SIZE", "8"},
                                                       {"LOCAL_RANK", "1"},
                                                       {"LOCAL_WORLD_SIZE", "4"},
                                                       {"GROUP_RANK", "1"},
                                                       {"GROUP_WORLD_SIZE", "2"},
                                                       {"ROLE_RANK", "3"},
                                                       {"ROLE_WORLD_SIZE", "8"},
                                                       {"HOROVOD_RANK", "3"},
                                                       {"HOROVOD_SIZE", "8"},
                                                       {"HOROVOD_LOCAL_RANK", "1"},
                                                       {"HOROVOD_LOCAL_SIZE", "4"},
                                                       {"MASTER_ADDR", "node-a"},
                                                       {"MASTER_PORT", "29500"}};
  EXPECT_EQ(env, expected);
  for (const auto& [name, value] : env) {
    EXPECT_NE(std::find(WorkerVariableNames().begin(), WorkerVariableNames().end(), name),
              WorkerVariableNames().end())
        << name;
  }
}

TEST(WorkerVariablesTest, LeavesOutAnUnknownMaster) {
  const auto env = WorkerVariables({0, 1, 0, 1, 0, 1}, "", 0);
  EXPECT_EQ(env.count("MASTER_ADDR"), 0u);
  EXPECT_EQ(env.count("MASTER_PORT"), 0u);
}

}  // namespace
}  // namespace tandem::launch
