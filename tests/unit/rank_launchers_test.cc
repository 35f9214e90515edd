// The pure parts of the launchers that start ranks: the mpirun and srun
// command lines (the secret never on them, the job's process count, the
// forwarded variables) and the rank-to-process mapping of `tandem rank-exec`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "launch/mpi_launcher.h"
#include "launch/rank_exec.h"
#include "launch/slurm_launcher.h"
#include "tandem/error.h"

namespace tandem::launch {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

LocalJobOptions Job(int workers, int servers, bool no_scheduler = false) {
  LocalJobOptions job;
  job.num_workers = workers;
  job.num_servers = servers;
  job.rendezvous_in_worker = no_scheduler;
  job.command = {"/bin/train", "--epochs", "3"};
  job.tandem_binary = "/opt/tandem/bin/tandem";
  job.env = {{"OMP_NUM_THREADS", "2"}};
  return job;
}

LocalJobIdentity Identity() { return {41000, "s3cr3t-value", "job-7"}; }

// The value after `flag` in argv, or "" when absent.
std::string After(const std::vector<std::string>& argv, const std::string& flag) {
  auto it = std::find(argv.begin(), argv.end(), flag);
  return it == argv.end() || it + 1 == argv.end() ? "" : *(it + 1);
}

struct CommandCase {
  int workers, servers;
  bool no_scheduler;
  int processes;
};

class MpirunCommand : public ::testing::TestWithParam<CommandCase> {};

TEST_P(MpirunCommand, CountsEveryRoleAndKeepsTheSecretOffTheCommandLine) {
  const CommandCase c = GetParam();
  MpiJobOptions o;
  o.job = Job(c.workers, c.servers, c.no_scheduler);
  o.mpi_args = {"--mca", "btl", "tcp,self"};
  ProcessSpec spec = BuildMpirunCommand(o, Identity(), {{"PATH", "/bin"}, {"PS_VERBOSE", "1"}});
  const auto& argv = spec.argv;
  EXPECT_EQ(argv[0], "mpirun");
  EXPECT_EQ(After(argv, "-np"), std::to_string(c.processes));
  EXPECT_FALSE(spec.prefix_output);
  for (const auto& a : argv) EXPECT_THAT(a, Not(HasSubstr("s3cr3t")));
  EXPECT_EQ(spec.env.at("TANDEM_SECRET"), "s3cr3t-value");
  EXPECT_EQ(spec.env.at("DMLC_PS_ROOT_URI"), "127.0.0.1");
  EXPECT_EQ(spec.env.at("DMLC_PS_ROOT_PORT"), "41000");
  // Forwarded by name: the job's variables and the launcher's PS_*.
  for (const char* name :
       {"TANDEM_SECRET", "TANDEM_JOB_ID", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "PS_VERBOSE"}) {
    bool found = false;
    for (size_t i = 0; i + 1 < argv.size(); ++i) found |= argv[i] == "-x" && argv[i + 1] == name;
    EXPECT_TRUE(found) << name;
  }
  EXPECT_EQ(After(argv, "--servers"), std::to_string(c.servers));
  EXPECT_EQ(After(argv, "--workers"), std::to_string(c.workers));
  EXPECT_EQ(std::count(argv.begin(), argv.end(), "--no-scheduler"), c.no_scheduler ? 1 : 0);
  EXPECT_THAT(argv, Contains("--loopback"));
  EXPECT_EQ(After(argv, "--env"), "OMP_NUM_THREADS=2");
  // The user's command comes last, untouched, after the mpi arguments.
  std::vector<std::string> tail(argv.end() - 4, argv.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"--", "/bin/train", "--epochs", "3"}));
  EXPECT_LT(std::find(argv.begin(), argv.end(), "btl") - argv.begin(),
            std::find(argv.begin(), argv.end(), "rank-exec") - argv.begin());
}

INSTANTIATE_TEST_SUITE_P(Jobs, MpirunCommand,
                         ::testing::Values(CommandCase{1, 0, false, 2}, CommandCase{4, 2, false, 7},
                                           CommandCase{3, 0, true, 3}));

TEST(MpirunCommand, HostsGoToMpirunAndTheSchedulerIsTheFirstHost) {
  MpiJobOptions o;
  o.job = Job(4, 1);
  o.hosts = {{"alice@node1", "node1", 2}, {"node2", "node2", 3}};
  ProcessSpec spec = BuildMpirunCommand(o, Identity(), {});
  EXPECT_EQ(After(spec.argv, "--host"), "alice@node1:2,node2:3");
  EXPECT_EQ(spec.env.at("DMLC_PS_ROOT_URI"), "node1");
  EXPECT_THAT(spec.argv, Not(Contains("--loopback")));
}

TEST(SrunCommand, CountsTasksGivesTheGraceAndKeepsTheSecretInTheEnvironment) {
  SlurmJobOptions o;
  o.job = Job(4, 2);
  o.srun_args = {"--partition=cpu"};
  o.grace_seconds = 7;
  ProcessSpec spec = BuildSrunCommand(o, Identity(), {{"DMLC_PS_ROOT_URI", "stale"}});
  const auto& argv = spec.argv;
  EXPECT_EQ(argv[0], "srun");
  EXPECT_THAT(argv, Contains("--ntasks=7"));
  EXPECT_THAT(argv, Contains("--kill-on-bad-exit=0"));
  EXPECT_THAT(argv, Contains("--wait=7"));
  EXPECT_THAT(argv, Contains("--export=ALL"));
  EXPECT_THAT(argv, Contains("--job-name=job-7"));
  for (const auto& a : argv) EXPECT_THAT(a, Not(HasSubstr("s3cr3t")));
  EXPECT_EQ(spec.env.at("TANDEM_SECRET"), "s3cr3t-value");
  EXPECT_EQ(spec.env.at("DMLC_PS_ROOT_PORT"), "41000");
  EXPECT_EQ(spec.env.count("DMLC_PS_ROOT_URI"), 0u);  // task 0's node, found by rank-exec
  EXPECT_LT(std::find(argv.begin(), argv.end(), "--partition=cpu") - argv.begin(),
            std::find(argv.begin(), argv.end(), "rank-exec") - argv.begin());
  EXPECT_THAT(argv, Not(Contains("--loopback")));
}

std::map<std::string, std::string> RankEnv(int rank, int size) {
  return {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
          {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
          {"PMIX_RANK", std::to_string(rank)},
          {"DMLC_PS_ROOT_URI", "node1"},
          {"DMLC_PS_ROOT_PORT", "41000"},
          {"TANDEM_SECRET", "s3cr3t-value"},
          {"TANDEM_JOB_ID", "job-7"},
          {"PATH", "/bin"}};
}

TEST(RankProcess, RanksAreTheSchedulerThenServersThenWorkers) {
  RankProcessOptions o;
  o.job = Job(3, 2);
  const std::vector<std::string> labels = {"scheduler", "server 0", "server 1",
                                           "worker 0",  "worker 1", "worker 2"};
  for (int rank = 0; rank < 6; ++rank) {
    ProcessSpec p = RankProcess(o, RankEnv(rank, 6));
    EXPECT_EQ(p.label, labels[static_cast<size_t>(rank)]);
    EXPECT_EQ(p.env.at("DMLC_PS_ROOT_URI"), "node1");
    EXPECT_EQ(p.env.at("DMLC_PS_ROOT_PORT"), "41000");
    EXPECT_EQ(p.env.at("TANDEM_SECRET"), "s3cr3t-value");
    EXPECT_EQ(p.env.at("OMP_NUM_THREADS"), "2");
    EXPECT_EQ(p.env.count("DMLC_NODE_HOST"), 0u);  // not loopback: the route decides
    // The MPI variables are not the process's contract.
    EXPECT_EQ(p.env.count("OMPI_COMM_WORLD_RANK"), 0u);
    EXPECT_EQ(p.env.count("PMIX_RANK"), 0u);
    if (rank == 0)
      EXPECT_EQ(p.argv, (std::vector<std::string>{"/opt/tandem/bin/tandem", "scheduler"}));
    if (rank >= 3) EXPECT_EQ(p.argv, o.job.command);
  }
  o.loopback = true;
  EXPECT_EQ(RankProcess(o, RankEnv(4, 6)).env.at("DMLC_NODE_HOST"), "127.0.0.1");
}

// Under srun: SLURM_PROCID/SLURM_NTASKS, and the scheduler on the first node
// of the step (the launcher cannot know it beforehand).
TEST(RankProcess, UnderSrunTheSchedulerIsTheStepsFirstNode) {
  RankProcessOptions o;
  o.job = Job(2, 1);
  std::map<std::string, std::string> env = {{"SLURM_PROCID", "3"},
                                            {"SLURM_NTASKS", "4"},
                                            {"SLURM_STEP_NODELIST", "cn[07-09],gpu1"},
                                            {"DMLC_PS_ROOT_PORT", "41000"},
                                            {"TANDEM_SECRET", "s"},
                                            {"TANDEM_JOB_ID", "j"}};
  ProcessSpec p = RankProcess(o, env);
  EXPECT_EQ(p.label, "worker 1");
  EXPECT_EQ(p.env.at("DMLC_PS_ROOT_URI"), "cn07");
  EXPECT_EQ(p.env.at("SLURM_PROCID"), "3");  // Slurm's variables stay for the program
}

TEST(RankProcess, RefusesAMismatchedSizeOrAMissingRank) {
  RankProcessOptions o;
  o.job = Job(3, 2);
  try {
    RankProcess(o, RankEnv(1, 4));
    ADD_FAILURE() << "a size mismatch was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("rank 1 of 4 processes (OMPI_COMM_WORLD_RANK), but the job has 6"));
  }
  auto env = RankEnv(0, 6);
  env.erase("OMPI_COMM_WORLD_RANK");
  env.erase("PMIX_RANK");
  EXPECT_THROW(RankProcess(o, env), ConfigError);
  env = RankEnv(0, 6);
  env.erase("TANDEM_SECRET");
  try {
    RankProcess(o, env);
    ADD_FAILURE() << "a missing secret was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("TANDEM_SECRET"));
  }
}

// The torchrun/Horovod variables of a rank's process, placed from what the
// ranks' launcher says about hosts: srun's tasks per node (and its node
// list for MASTER_ADDR), mpirun's local size (the first host is the
// scheduler's), nothing (only RANK and WORLD_SIZE: which ranks share a host
// is unknown), or every rank on this host (--loopback). "-" marks a
// variable that must be absent.
struct PlacementCase {
  const char* name;
  int workers, servers;
  bool no_scheduler, loopback;
  int rank, size;
  std::map<std::string, std::string> launcher_env;  // added to the rank's environment
  std::map<std::string, std::string> expected;
};

class RankWorkerVariables : public ::testing::TestWithParam<PlacementCase> {};

TEST_P(RankWorkerVariables, FollowTheRanksHosts) {
  const PlacementCase& c = GetParam();
  RankProcessOptions o;
  o.job = Job(c.workers, c.servers, c.no_scheduler);
  o.loopback = c.loopback;
  std::map<std::string, std::string> env = RankEnv(c.rank, c.size);
  env["TANDEM_MASTER_PORT"] = "42000";
  env["RANK"] = "99";  // stale, from the launcher's own environment
  for (const auto& [name, value] : c.launcher_env) env[name] = value;
  ProcessSpec p = RankProcess(o, env);
  for (const auto& [name, value] : c.expected) {
    if (value == "-") {
      EXPECT_EQ(p.env.count(name), 0u) << name << " of " << p.label;
    } else {
      ASSERT_EQ(p.env.count(name), 1u) << name << " missing from " << p.label;
      EXPECT_EQ(p.env.at(name), value) << name << " of " << p.label;
    }
  }
  EXPECT_EQ(p.env.count("TANDEM_MASTER_PORT"), 0u);  // rank-exec's own, not the program's
}

// Slurm, 3 tasks on each of 2 nodes: scheduler, server, worker 0 on n1;
// workers 1..3 on n2.
const std::map<std::string, std::string> kSlurmTwoNodes = {{"SLURM_STEP_TASKS_PER_NODE", "3(x2)"},
                                                           {"SLURM_STEP_NODELIST", "n[1-2]"}};
// mpirun's by-slot mapping, 2 ranks per host.
const std::map<std::string, std::string> kOmpiTwoPerHost = {{"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};

INSTANTIATE_TEST_SUITE_P(Launchers, RankWorkerVariables,
                         ::testing::Values(PlacementCase{"SlurmWorkerAloneOnTheFirstNode",
                                                         4,
                                                         1,
                                                         false,
                                                         false,
                                                         2,
                                                         6,
                                                         kSlurmTwoNodes,
                                                         {{"RANK", "0"},
                                                          {"WORLD_SIZE", "4"},
                                                          {"LOCAL_RANK", "0"},
                                                          {"LOCAL_WORLD_SIZE", "1"},
                                                          {"GROUP_RANK", "0"},
                                                          {"GROUP_WORLD_SIZE", "2"},
                                                          {"MASTER_ADDR", "n1"},
                                                          {"MASTER_PORT", "42000"},
                                                          {"HOROVOD_RANK", "0"},
                                                          {"HOROVOD_SIZE", "4"},
                                                          {"HOROVOD_LOCAL_RANK", "0"},
                                                          {"HOROVOD_LOCAL_SIZE", "1"}}},
                                           PlacementCase{"SlurmWorkerOnTheSecondNode",
                                                         4,
                                                         1,
                                                         false,
                                                         false,
                                                         4,
                                                         6,
                                                         kSlurmTwoNodes,
                                                         {{"RANK", "2"},
                                                          {"WORLD_SIZE", "4"},
                                                          {"LOCAL_RANK", "1"},
                                                          {"LOCAL_WORLD_SIZE", "3"},
                                                          {"GROUP_RANK", "1"},
                                                          {"GROUP_WORLD_SIZE", "2"},
                                                          {"MASTER_ADDR", "n1"},
                                                          {"MASTER_PORT", "42000"},
                                                          {"HOROVOD_RANK", "2"},
                                                          {"HOROVOD_LOCAL_RANK", "1"},
                                                          {"HOROVOD_LOCAL_SIZE", "3"}}},
                                           PlacementCase{"SlurmServerGetsNone",
                                                         4,
                                                         1,
                                                         false,
                                                         false,
                                                         1,
                                                         6,
                                                         kSlurmTwoNodes,
                                                         {{"RANK", "-"},
                                                          {"WORLD_SIZE", "-"},
                                                          {"LOCAL_RANK", "-"},
                                                          {"MASTER_ADDR", "-"},
                                                          {"MASTER_PORT", "-"},
                                                          {"HOROVOD_RANK", "-"}}},
                                           PlacementCase{"OmpiNoSchedulerSecondHost",
                                                         4,
                                                         0,
                                                         true,
                                                         false,
                                                         3,
                                                         4,
                                                         kOmpiTwoPerHost,
                                                         {{"RANK", "3"},
                                                          {"WORLD_SIZE", "4"},
                                                          {"LOCAL_RANK", "1"},
                                                          {"LOCAL_WORLD_SIZE", "2"},
                                                          {"GROUP_RANK", "1"},
                                                          {"GROUP_WORLD_SIZE", "2"},
                                                          {"MASTER_ADDR", "node1"},
                                                          {"MASTER_PORT", "42000"},
                                                          {"HOROVOD_LOCAL_SIZE", "2"}}},
                                           PlacementCase{"OmpiSchedulerTakesTheFirstSlot",
                                                         3,
                                                         0,
                                                         false,
                                                         false,
                                                         2,
                                                         4,
                                                         kOmpiTwoPerHost,
                                                         {{"RANK", "1"},
                                                          {"WORLD_SIZE", "3"},
                                                          {"LOCAL_RANK", "0"},
                                                          {"LOCAL_WORLD_SIZE", "2"},
                                                          {"GROUP_RANK", "1"},
                                                          {"MASTER_ADDR", "node1"}}},
                                           PlacementCase{"UnknownHostsGiveOnlyTheGlobalRank",
                                                         2,
                                                         0,
                                                         true,
                                                         false,
                                                         1,
                                                         2,
                                                         {},
                                                         {{"RANK", "1"},
                                                          {"WORLD_SIZE", "2"},
                                                          {"HOROVOD_RANK", "1"},
                                                          {"HOROVOD_SIZE", "2"},
                                                          {"MASTER_PORT", "42000"},
                                                          {"LOCAL_RANK", "-"},
                                                          {"LOCAL_WORLD_SIZE", "-"},
                                                          {"GROUP_RANK", "-"},
                                                          {"HOROVOD_LOCAL_RANK", "-"},
                                                          {"MASTER_ADDR", "-"}}},
                                           PlacementCase{"LoopbackIsOneHost",
                                                         3,
                                                         1,
                                                         false,
                                                         true,
                                                         4,
                                                         5,
                                                         {},
                                                         {{"RANK", "2"},
                                                          {"WORLD_SIZE", "3"},
                                                          {"LOCAL_RANK", "2"},
                                                          {"LOCAL_WORLD_SIZE", "3"},
                                                          {"GROUP_RANK", "0"},
                                                          {"GROUP_WORLD_SIZE", "1"},
                                                          {"MASTER_ADDR", "127.0.0.1"},
                                                          {"MASTER_PORT", "42000"}}}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace tandem::launch
