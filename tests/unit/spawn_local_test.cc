// `tandem spawn-local`: the node's description read from a TrainJob's or a
// PyTorchJob's variables, the environment each local process gets (as
// torchrun gives it), and that the start-up contract reads every child as
// the rank it is.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <tuple>

#include "base/environment.h"
#include "cluster/contract_detection.h"
#include "launch/local_spawn.h"
#include "tandem/error.h"

namespace tandem::launch {
namespace {

using Env = std::map<std::string, std::string>;

// nnodes, nproc per node, node rank, PyTorchJob (else TrainJob)
using Shape = std::tuple<int, int, int, bool>;

Env PodEnvironment(int nnodes, int nproc, int node_rank, bool pytorchjob) {
  Env env{{"PATH", "/usr/bin:/bin"},
          {"PET_NNODES", std::to_string(nnodes)},
          {"PET_NODE_RANK", std::to_string(node_rank)},
          {"PET_NPROC_PER_NODE", std::to_string(nproc)},
          {"KEEP_ME", "x y"}};
  if (pytorchjob) {
    // training-operator: RANK = the pod's index, WORLD_SIZE = pods x nproc.
    env["RANK"] = std::to_string(node_rank);
    env["WORLD_SIZE"] = std::to_string(nnodes * nproc);
    env["MASTER_ADDR"] = "job-master-0";
    env["MASTER_PORT"] = "23456";
  } else {
    env["PET_MASTER_ADDR"] = "job-node-0-0.job";
    env["PET_MASTER_PORT"] = "29400";
  }
  return env;
}

class LocalSpawnShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(LocalSpawnShapes, EachChildHasTorchrunsVariables) {
  const int nnodes = std::get<0>(GetParam());
  const int nproc = std::get<1>(GetParam());
  const int node = std::get<2>(GetParam());
  const bool pytorchjob = std::get<3>(GetParam());
  const Env pod = PodEnvironment(nnodes, nproc, node, pytorchjob);
  const LocalSpawnPlan plan = ReadLocalSpawnPlan(pod);
  EXPECT_EQ(plan.source, pytorchjob ? "pytorchjob" : "trainjob");
  EXPECT_EQ(plan.node_count, nnodes);
  EXPECT_EQ(plan.node_rank, node);
  EXPECT_EQ(plan.nproc_per_node, nproc);
  const std::string host = pytorchjob ? "job-master-0" : "job-node-0-0.job";
  const uint16_t port = pytorchjob ? 23456 : 29400;
  EXPECT_EQ(plan.master_addr, host);
  EXPECT_EQ(plan.master_port, port);

  const std::vector<std::string> command{"python3", "-c", "print('a b')", "--", "--x=1"};
  auto specs = LocalSpawnProcesses(plan, command, pod);
  ASSERT_EQ(specs.size(), static_cast<size_t>(nproc));
  std::set<int> ranks;
  for (int local = 0; local < nproc; ++local) {
    const auto& s = specs[local];
    const int rank = node * nproc + local;
    EXPECT_EQ(s.label, "rank " + std::to_string(rank));
    EXPECT_EQ(s.argv, command);  // passed through untouched
    const Env& e = s.env;
    EXPECT_EQ(e.at("RANK"), std::to_string(rank));
    EXPECT_EQ(e.at("LOCAL_RANK"), std::to_string(local));
    EXPECT_EQ(e.at("WORLD_SIZE"), std::to_string(nnodes * nproc));
    EXPECT_EQ(e.at("LOCAL_WORLD_SIZE"), std::to_string(nproc));
    EXPECT_EQ(e.at("GROUP_RANK"), std::to_string(node));
    EXPECT_EQ(e.at("GROUP_WORLD_SIZE"), std::to_string(nnodes));
    EXPECT_EQ(e.at("ROLE_RANK"), std::to_string(rank));
    EXPECT_EQ(e.at("ROLE_WORLD_SIZE"), std::to_string(nnodes * nproc));
    EXPECT_EQ(e.at("MASTER_ADDR"), host);
    EXPECT_EQ(e.at("MASTER_PORT"), std::to_string(port));
    EXPECT_EQ(e.at("TANDEM_SPAWN_LOCAL"), plan.source);
    EXPECT_EQ(e.at("KEEP_ME"), "x y");
    EXPECT_EQ(e.at("PET_NPROC_PER_NODE"), std::to_string(nproc));

    // The child's start-up contract: the torchrun reader, named spawn-local.
    auto detected = cluster::DetectContract(base::Environment(e));
    ASSERT_TRUE(detected.peers.has_value()) << detected.ToString();
    const auto& c = *detected.peers;
    EXPECT_EQ(c.name, "spawn-local");
    EXPECT_EQ(c.rank, rank);
    EXPECT_EQ(c.world_size, nnodes * nproc);
    EXPECT_EQ(c.local_rank, local);
    EXPECT_EQ(c.local_size, nproc);
    EXPECT_EQ(c.node_rank, node);
    EXPECT_EQ(c.node_count, nnodes);
    EXPECT_EQ(c.coordinator_host, host);
    EXPECT_EQ(c.coordinator_port, port);
    EXPECT_TRUE(detected.also_present.empty()) << detected.ToString();
    ranks.insert(c.rank);
  }
  EXPECT_EQ(ranks.size(), static_cast<size_t>(nproc));
}

INSTANTIATE_TEST_SUITE_P(Shapes, LocalSpawnShapes,
                         ::testing::Values(Shape{1, 1, 0, false}, Shape{1, 4, 0, false},
                                           Shape{2, 2, 0, false}, Shape{2, 2, 1, false},
                                           Shape{3, 8, 2, false}, Shape{4, 3, 1, false},
                                           Shape{2, 2, 1, true}, Shape{3, 4, 0, true},
                                           Shape{5, 2, 4, true}));

TEST(LocalSpawn, PyTorchJobWithoutPetNodeVariablesUsesRankAndWorldSize) {
  Env env{{"RANK", "2"}, {"WORLD_SIZE", "12"}, {"PET_NPROC_PER_NODE", "4"}, {"MASTER_ADDR", "m"}};
  const LocalSpawnPlan plan = ReadLocalSpawnPlan(env);
  EXPECT_EQ(plan.node_count, 3);
  EXPECT_EQ(plan.node_rank, 2);
  EXPECT_EQ(plan.master_port, 29500);
  EXPECT_EQ(LocalProcessEnvironment(plan, 3, env).at("RANK"), "11");
}

// A pod's variables and a part of the ConfigError's text (named by the
// test's label).
struct BadPod {
  std::string label;
  Env env;
  std::string message;
};

class LocalSpawnRefuses : public ::testing::TestWithParam<BadPod> {};

TEST_P(LocalSpawnRefuses, NamesTheVariable) {
  EXPECT_THAT([] { ReadLocalSpawnPlan(GetParam().env); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr(GetParam().message)));
}

const Env kTrainJob{{"PET_NNODES", "2"},
                    {"PET_NODE_RANK", "1"},
                    {"PET_NPROC_PER_NODE", "2"},
                    {"PET_MASTER_ADDR", "m"}};

Env With(Env env, const std::string& name, const std::string& value) {
  env[name] = value;
  return env;
}

Env Without(Env env, const std::string& name) {
  env.erase(name);
  return env;
}

INSTANTIATE_TEST_SUITE_P(
    Pods, LocalSpawnRefuses,
    ::testing::Values(
        BadPod{"no_nproc", Without(kTrainJob, "PET_NPROC_PER_NODE"),
               "PET_NPROC_PER_NODE is not set"},
        BadPod{"nproc_auto", With(kTrainJob, "PET_NPROC_PER_NODE", "auto"),
               "PET_NPROC_PER_NODE=\"auto\" is not an integer"},
        BadPod{"nproc_zero", With(kTrainJob, "PET_NPROC_PER_NODE", "0"),
               "PET_NPROC_PER_NODE=0 is outside"},
        BadPod{"elastic", With(kTrainJob, "PET_NNODES", "1:4"), "PET_NNODES=\"1:4\""},
        BadPod{"node_rank_out", With(kTrainJob, "PET_NODE_RANK", "2"), "PET_NODE_RANK=2"},
        BadPod{"no_node_rank", Without(kTrainJob, "PET_NODE_RANK"), "PET_NODE_RANK is not set"},
        BadPod{"no_master", Without(kTrainJob, "PET_MASTER_ADDR"), "PET_MASTER_ADDR"},
        BadPod{"bad_port", With(kTrainJob, "PET_MASTER_PORT", "70000"), "PET_MASTER_PORT=70000"},
        BadPod{"pytorchjob_world", With(With(kTrainJob, "RANK", "1"), "WORLD_SIZE", "2"),
               "WORLD_SIZE=2 but PET_NNODES=2 x PET_NPROC_PER_NODE=2 is 4"},
        BadPod{"pytorchjob_rank", With(With(kTrainJob, "RANK", "0"), "WORLD_SIZE", "4"),
               "RANK=0 (the pod's index) but PET_NODE_RANK=1"}),
    [](const ::testing::TestParamInfo<BadPod>& p) { return p.param.label; });

TEST(LocalSpawn, RefusesAnEmptyCommand) {
  const LocalSpawnPlan plan = ReadLocalSpawnPlan(kTrainJob);
  EXPECT_THROW(LocalSpawnProcesses(plan, {}, kTrainJob), InvalidArgument);
}

}  // namespace
}  // namespace tandem::launch
