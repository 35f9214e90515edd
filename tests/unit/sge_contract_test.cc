// Grid Engine's start-up contract (src/cluster/sge_contract.cc), read from
// the variables Grid Engine sets (as a one-machine cell printed them): an
// array job's tasks are ranks; a task that qrsh -inherit started in a
// parallel job is refused unless tandem's launcher gave it its role; a
// parallel job's script is one process (its log names Grid Engine as
// present but not used); and the contracts of launchers run inside a Grid
// Engine job win over it.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "cluster/contract_detection.h"
#include "cluster/launch_contract.h"
#include "cluster/startup_environment.h"
#include "tandem/error.h"

namespace tandem::cluster {
namespace {

using Env = std::map<std::string, std::string>;

Env With(Env base, const Env& more) {
  for (const auto& [k, v] : more) base[k] = v;
  return base;
}

// What every job and task has, as Grid Engine 8.1.9 sets it.
const Env kJob = {{"JOB_ID", "42"},
                  {"JOB_NAME", "train.sh"},
                  {"SGE_CELL", "default"},
                  {"SGE_TASK_ID", "undefined"},
                  {"SGE_TASK_FIRST", "undefined"},
                  {"SGE_TASK_LAST", "undefined"},
                  {"SGE_TASK_STEPSIZE", "undefined"},
                  {"QUEUE", "all.q"},
                  {"NHOSTS", "1"},
                  {"NSLOTS", "1"}};

// A task of `qsub -t FIRST-LAST:STEP`.
Env ArrayTask(const std::string& id, const std::string& first, const std::string& last,
              const std::string& step, const Env& more = {}) {
  return With(With(kJob, {{"SGE_TASK_ID", id},
                          {"SGE_TASK_FIRST", first},
                          {"SGE_TASK_LAST", last},
                          {"SGE_TASK_STEPSIZE", step}}),
              more);
}

// The script of `qsub -pe mpi 4`, and a task its `qrsh -inherit` started.
const Env kParallelJobScript =
    With(kJob, {{"PE", "mpi"},
                {"NSLOTS", "4"},
                {"NHOSTS", "2"},
                {"PE_HOSTFILE", "/spool/n1/active_jobs/42.1/pe_hostfile"},
                {"JOB_SCRIPT", "/spool/n1/job_scripts/42"}});
const Env kParallelTask = With(kJob, {{"PE", "mpi"},
                                      {"NSLOTS", "4"},
                                      {"NHOSTS", "2"},
                                      {"JOB_NAME", "petask"},
                                      {"REQNAME", "petask"},
                                      {"JOB_SCRIPT", "QRSH"},
                                      {"QRSH_PORT", "n1:40621"}});

struct ArrayCase {
  std::string label;
  Env env;
  int rank, world_size;
  std::string coordinator_host;
  uint16_t coordinator_port;
};

void PrintTo(const ArrayCase& c, std::ostream* os) { *os << c.label; }

class SgeArrayTask : public ::testing::TestWithParam<ArrayCase> {};

TEST_P(SgeArrayTask, IsTheRankOfItsIndexInTheRange) {
  const ArrayCase& want = GetParam();
  DetectedContract got = DetectContract(base::Environment(want.env));
  ASSERT_TRUE(got.peers.has_value()) << got.ToString();
  const LaunchContract& c = *got.peers;
  EXPECT_EQ(got.name, "sge");
  EXPECT_EQ(c.rank, want.rank);
  EXPECT_EQ(c.world_size, want.world_size);
  EXPECT_EQ(c.local_rank, 0);
  EXPECT_EQ(c.local_size, 1);
  EXPECT_EQ(c.node_rank, want.rank);
  EXPECT_EQ(c.node_count, want.world_size);
  EXPECT_EQ(c.coordinator_host, want.coordinator_host);
  EXPECT_EQ(c.coordinator_port, want.coordinator_port);
  EXPECT_TRUE(got.also_present.empty()) << got.ToString();
}

INSTANTIATE_TEST_SUITE_P(
    Arrays, SgeArrayTask,
    ::testing::Values(ArrayCase{"qsub -t 1-4, task 1", ArrayTask("1", "1", "4", "1"), 0, 4, "", 0},
                      ArrayCase{"qsub -t 1-4, task 4, MASTER_ADDR and MASTER_PORT",
                                ArrayTask("4", "1", "4", "1",
                                          {{"MASTER_ADDR", "n7"}, {"MASTER_PORT", "6000"}}),
                                3, 4, "n7", 6000},
                      ArrayCase{"qsub -t 2-10:4, task 6 (2, 6, 10)",
                                ArrayTask("6", "2", "10", "4", {{"TANDEM_COORDINATOR", "n3:7000"}}),
                                1, 3, "n3", 7000},
                      ArrayCase{"qsub -t 5 (one task), MASTER_ADDR without a port",
                                ArrayTask("5", "5", "5", "1", {{"MASTER_ADDR", "n1"}}), 0, 1, "n1",
                                kDefaultCoordinatorPort}));

TEST(SgeArrayTask, TurnsIntoAWorkerOrServerOfPeers) {
  Env env = ArrayTask("3", "1", "3", "1",
                      {{"TANDEM_COORDINATOR", "n1:7000"}, {"TANDEM_NUM_SERVERS", "1"}});
  Env got = ResolveStartupEnvironment(base::Environment(env));
  EXPECT_EQ(got.at("DMLC_ROLE"), "server");
  EXPECT_EQ(got.at("DMLC_SERVER_ID"), "0");
  EXPECT_EQ(got.at("DMLC_NUM_WORKER"), "2");
  EXPECT_EQ(got.at("DMLC_NUM_SERVER"), "1");
  EXPECT_EQ(got.at("DMLC_PS_ROOT_URI"), "n1");
  EXPECT_EQ(got.at("DMLC_PS_ROOT_PORT"), "7000");
  EXPECT_EQ(got.at("TANDEM_RENDEZVOUS_IN_PROCESS"), "1");
  EXPECT_EQ(got.at(kResolvedContractVariable),
            "sge: rank 2 of 3 (local 0 of 1, node 2 of 3), coordinator n1:7000 -> server 0 of 2 "
            "workers and 1 servers; worker 0 hosts the rendezvous at n1:7000 (TANDEM_COORDINATOR)");
}

TEST(SgeArrayTask, SeveralTasksWithoutACoordinatorAreRefusedNamingTheVariables) {
  try {
    ResolveStartupEnvironment(base::Environment(ArrayTask("2", "1", "4", "1")));
    FAIL() << "an array job of 4 tasks started without a rendezvous address";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "sge gives rank 1 of 4 but no rendezvous address for rank 0: set "
                 "TANDEM_COORDINATOR=host:port (or MASTER_ADDR and MASTER_PORT)");
  }
}

struct OrderCase {
  std::string label;
  Env env;
  std::string winner;
  std::vector<std::string> also_present;
};

void PrintTo(const OrderCase& c, std::ostream* os) { *os << c.label; }

class SgeContractOrder : public ::testing::TestWithParam<OrderCase> {};

TEST_P(SgeContractOrder, LaunchersInsideTheJobWinAndAJobScriptRunsAlone) {
  DetectedContract d = DetectContract(base::Environment(GetParam().env));
  EXPECT_EQ(d.name, GetParam().winner) << d.ToString();
  EXPECT_EQ(d.also_present, GetParam().also_present) << d.ToString();
}

INSTANTIATE_TEST_SUITE_P(
    Order, SgeContractOrder,
    ::testing::Values(
        OrderCase{"a parallel job's script is one process (the log says Grid Engine gave no "
                  "rank)",
                  kParallelJobScript,
                  "single",
                  {"sge"}},
        OrderCase{"a job that is not an array is one process", kJob, "single", {"sge"}},
        OrderCase{"a task of tandem launch --launcher sge is DMLC",
                  With(kParallelTask, {{"DMLC_ROLE", "worker"},
                                       {"DMLC_PS_ROOT_URI", "n1"},
                                       {"DMLC_PS_ROOT_PORT", "23456"},
                                       {"DMLC_NUM_SERVER", "1"},
                                       {"DMLC_NUM_WORKER", "2"},
                                       {"DMLC_WORKER_ID", "1"}}),
                  "dmlc",
                  {"sge"}},
        OrderCase{"mpirun's ranks inside a parallel job are MPI",
                  With(kParallelTask, {{"OMPI_COMM_WORLD_RANK", "1"},
                                       {"OMPI_COMM_WORLD_SIZE", "4"},
                                       {"MASTER_ADDR", "n1"}}),
                  "ompi",
                  {"sge"}},
        OrderCase{"torchrun inside an array task is torchrun",
                  ArrayTask("2", "1", "2", "1",
                            {{"TORCHELASTIC_RUN_ID", "r"},
                             {"RANK", "1"},
                             {"WORLD_SIZE", "2"},
                             {"LOCAL_RANK", "1"},
                             {"LOCAL_WORLD_SIZE", "2"},
                             {"MASTER_ADDR", "127.0.0.1"},
                             {"MASTER_PORT", "29500"}}),
                  "torchrun",
                  {"sge"}},
        OrderCase{"TANDEM_* beats an array task",
                  ArrayTask("1", "1", "2", "1", {{"TANDEM_WORLD_SIZE", "1"}, {"TANDEM_RANK", "0"}}),
                  "tandem",
                  {"sge"}}));

TEST(SgeContract, ATaskLaunchedByTandemLaunchIsNotReadAsGridEngines) {
  // tandem.local_rank() of a server that `tandem launch --launcher sge`
  // started: DMLC_ROLE says what it is, so the SGE reader stays out.
  Env server = With(kParallelTask, {{"DMLC_ROLE", "server"}, {"DMLC_PS_ROOT_URI", "n1"}});
  EXPECT_FALSE(ReadSgeContract(base::Environment(server)).has_value());
}

struct BadCase {
  std::string label;
  Env env;
  std::string message;  // a part of the ConfigError's text
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.label; }

class BadSgeContract : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadSgeContract, FailsNamingTheVariable) {
  try {
    DetectedContract d = DetectContract(base::Environment(GetParam().env));
    ADD_FAILURE() << "accepted: " << d.ToString();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(GetParam().message), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Errors, BadSgeContract,
    ::testing::Values(
        BadCase{"a qrsh -inherit task has no rank", kParallelTask,
                "JOB_NAME=petask: Grid Engine started this process with qrsh -inherit as a task "
                "of parallel job 42 (NSLOTS=4), and such a task gets no rank from Grid Engine: "
                "start the job's processes with `tandem launch --launcher sge`"},
        BadCase{"a qrsh -inherit task of an array job has no rank either",
                ArrayTask("2", "1", "2", "1", {{"JOB_NAME", "petask"}, {"PE", "mpi"}}),
                "JOB_NAME=petask"},
        BadCase{"an array task without its range",
                Env{{"JOB_ID", "42"}, {"SGE_TASK_ID", "3"}, {"SGE_TASK_FIRST", "1"}},
                "SGE_TASK_ID=3 marks a task of a Grid Engine array job, but SGE_TASK_LAST is not "
                "set"},
        BadCase{"an index off the step", ArrayTask("4", "1", "9", "2"),
                "SGE_TASK_ID=4 is not a task of the array 1-9:2"},
        BadCase{"an index beyond the range", ArrayTask("11", "1", "9", "2"), "SGE_TASK_ID=11"},
        BadCase{"a step that is not a number", ArrayTask("1", "1", "9", "two"),
                "SGE_TASK_STEPSIZE='two' is not an integer"},
        BadCase{"a range that runs backwards", ArrayTask("5", "5", "3", "1"),
                "SGE_TASK_LAST=3 is out of range"}));

}  // namespace
}  // namespace tandem::cluster
