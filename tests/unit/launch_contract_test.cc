// The start-up contracts of launchers and cluster managers, each read from
// the exact variables that launcher sets, and the order in which they are
// tried.
#include "cluster/launch_contract.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "cluster/contract_detection.h"
#include "tandem/error.h"

namespace tandem::cluster {
namespace {

using Env = std::map<std::string, std::string>;

struct ContractCase {
  std::string label;
  Env env;
  std::string name;
  int rank, world_size, local_rank, local_size, node_rank, node_count;
  std::string coordinator_host;
  uint16_t coordinator_port;
};

void PrintTo(const ContractCase& c, std::ostream* os) { *os << c.label; }

// A TFJob's cluster as the operator writes it: a chief, two workers and two
// ps tasks; each case appends its task.
const std::string kTfConfigPs =
    R"({"cluster": {"chief": ["tj-chief-0.ns.svc:2222"],
                    "worker": ["tj-worker-0.ns.svc:2222", "tj-worker-1.ns.svc:2222"],
                    "ps": ["tj-ps-0.ns.svc:2222", "tj-ps-1.ns.svc:2222"]},
        "environment": "cloud", )";

class ContractReading : public ::testing::TestWithParam<ContractCase> {};

TEST_P(ContractReading, NormalisesTheLaunchersVariables) {
  const ContractCase& want = GetParam();
  DetectedContract got = DetectContract(base::Environment(want.env));
  ASSERT_TRUE(got.peers.has_value()) << got.ToString();
  const LaunchContract& c = *got.peers;
  EXPECT_EQ(got.name, want.name);
  EXPECT_EQ(c.name, want.name);
  EXPECT_EQ(c.rank, want.rank);
  EXPECT_EQ(c.world_size, want.world_size);
  EXPECT_EQ(c.local_rank, want.local_rank);
  EXPECT_EQ(c.local_size, want.local_size);
  EXPECT_EQ(c.node_rank, want.node_rank);
  EXPECT_EQ(c.node_count, want.node_count);
  EXPECT_EQ(c.coordinator_host, want.coordinator_host);
  EXPECT_EQ(c.coordinator_port, want.coordinator_port);
}

INSTANTIATE_TEST_SUITE_P(
    EveryContract, ContractReading,
    ::testing::Values(
        ContractCase{"tandem",
                     {{"TANDEM_WORLD_SIZE", "8"},
                      {"TANDEM_RANK", "5"},
                      {"TANDEM_LOCAL_RANK", "1"},
                      {"TANDEM_LOCAL_SIZE", "2"},
                      {"TANDEM_NODE_RANK", "2"},
                      {"TANDEM_NODE_COUNT", "4"},
                      {"TANDEM_COORDINATOR", "[fd00::1]:7000"}},
                     "tandem",
                     5,
                     8,
                     1,
                     2,
                     2,
                     4,
                     "fd00::1",
                     7000},
        ContractCase{"ompi with MASTER_ADDR",
                     {{"OMPI_COMM_WORLD_RANK", "3"},
                      {"OMPI_COMM_WORLD_SIZE", "4"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                      {"MASTER_ADDR", "node-a"},
                      {"MASTER_PORT", "1234"}},
                     "ompi",
                     3,
                     4,
                     1,
                     2,
                     1,
                     2,
                     "node-a",
                     1234},
        ContractCase{"pmi (hydra)",
                     {{"PMI_RANK", "2"},
                      {"PMI_SIZE", "3"},
                      {"MPI_LOCALRANKID", "0"},
                      {"MPI_LOCALNRANKS", "1"},
                      {"TANDEM_COORDINATOR", "127.0.0.21"}},
                     "pmi",
                     2,
                     3,
                     0,
                     1,
                     2,
                     3,
                     "127.0.0.21",
                     kDefaultCoordinatorPort},
        ContractCase{"slurm srun -n 7 on three nodes",
                     {{"SLURM_JOB_ID", "4242"},
                      {"SLURM_STEP_ID", "3"},
                      {"SLURM_PROCID", "6"},
                      {"SLURM_STEP_NUM_TASKS", "7"},
                      {"SLURM_STEP_NUM_NODES", "3"},
                      {"SLURM_NODEID", "2"},
                      {"SLURM_LOCALID", "0"},
                      {"SLURM_STEP_TASKS_PER_NODE", "3(x2),1"},
                      {"SLURM_STEP_NODELIST", "gpu[07-08],cpu1"}},
                     "slurm",
                     6,
                     7,
                     0,
                     1,
                     2,
                     3,
                     "gpu07",
                     static_cast<uint16_t>(10000 + (4242 * 16 + 3) % 22768)},
        ContractCase{"slurm with MASTER_PORT",
                     {{"SLURM_JOB_ID", "1"},
                      {"SLURM_STEP_ID", "0"},
                      {"SLURM_PROCID", "1"},
                      {"SLURM_STEP_NUM_TASKS", "2"},
                      {"SLURM_STEP_NUM_NODES", "1"},
                      {"SLURM_NODEID", "0"},
                      {"SLURM_LOCALID", "1"},
                      {"SLURM_STEP_TASKS_PER_NODE", "2"},
                      {"SLURM_STEP_NODELIST", "localhost"},
                      {"MASTER_PORT", "6000"}},
                     "slurm",
                     1,
                     2,
                     1,
                     2,
                     0,
                     1,
                     "localhost",
                     6000},
        ContractCase{"torchrun --nnodes 2 --nproc-per-node 2",
                     {{"TORCHELASTIC_RUN_ID", "abc"},
                      {"MASTER_ADDR", "master"},
                      {"MASTER_PORT", "29400"},
                      {"RANK", "3"},
                      {"WORLD_SIZE", "4"},
                      {"LOCAL_RANK", "1"},
                      {"LOCAL_WORLD_SIZE", "2"},
                      {"GROUP_RANK", "1"}},
                     "torchrun",
                     3,
                     4,
                     1,
                     2,
                     1,
                     2,
                     "master",
                     29400},
        ContractCase{"pytorchjob, one process per pod",
                     {{"MASTER_ADDR", "job-master-0"},
                      {"MASTER_PORT", "23456"},
                      {"RANK", "2"},
                      {"WORLD_SIZE", "3"},
                      {"PET_NPROC_PER_NODE", "1"}},
                     "pytorchjob",
                     2,
                     3,
                     0,
                     1,
                     2,
                     3,
                     "job-master-0",
                     23456},
        ContractCase{"trainjob, one process per node",
                     {{"PET_NNODES", "4"},
                      {"PET_NODE_RANK", "1"},
                      {"PET_MASTER_ADDR", "tj-node-0-0.tj"},
                      {"PET_MASTER_PORT", "29400"},
                      {"PET_NPROC_PER_NODE", "1"}},
                     "trainjob",
                     1,
                     4,
                     0,
                     1,
                     1,
                     4,
                     "tj-node-0-0.tj",
                     29400},
        ContractCase{"indexed job from its host name",
                     {{"JOB_COMPLETION_INDEX", "12"},
                      {"WORLD_SIZE", "16"},
                      {"HOSTNAME", "train-12"},
                      {"TANDEM_SUBDOMAIN", "train-svc"}},
                     "indexed-job",
                     12,
                     16,
                     0,
                     1,
                     12,
                     16,
                     "train-0.train-svc",
                     kDefaultCoordinatorPort},
        ContractCase{"volcano peers ranked by task name",
                     {{"VC_TASK_INDEX", "1"},
                      {"HOSTNAME", "vj-worker-1"},
                      {"VC_WORKER_HOSTS", "vj-worker-0.vj,vj-worker-1.vj"},
                      {"VC_WORKER_NUM", "2"},
                      {"VC_CHIEF_HOSTS", "vj-chief-0.vj"},
                      {"VC_CHIEF_NUM", "1"}},
                     "volcano",
                     2,
                     3,
                     0,
                     1,
                     2,
                     3,
                     "vj-chief-0.vj",
                     kDefaultCoordinatorPort},
        // TFJob: the chief is rank 0, workers follow, ps tasks are the last ranks.
        ContractCase{"tfjob worker after the chief",
                     {{"TF_CONFIG", kTfConfigPs + R"("task": {"type": "worker", "index": 1}})"}},
                     "tfjob",
                     2,
                     5,
                     0,
                     1,
                     2,
                     5,
                     "tj-chief-0.ns.svc",
                     2222},
        ContractCase{"tfjob ps task",
                     {{"TF_CONFIG", kTfConfigPs + R"("task": {"type": "ps", "index": 1}})"}},
                     "tfjob",
                     4,
                     5,
                     0,
                     1,
                     4,
                     5,
                     "tj-chief-0.ns.svc",
                     2222},
        ContractCase{"tfjob without a chief: worker 0 leads",
                     {{"TF_CONFIG",
                       R"({"cluster": {"worker": ["w0:2000", "w1:2000"]},
                           "task": {"type": "worker", "index": 1}, "environment": "cloud"})"}},
                     "tfjob",
                     1,
                     2,
                     0,
                     1,
                     1,
                     2,
                     "w0",
                     2000},
        ContractCase{"tfjob master (older TFJobs' chief)",
                     {{"TF_CONFIG", R"({"cluster": {"master": ["m0:2222"], "worker": ["w0:2222"]},
                                        "task": {"type": "master", "index": 0}})"}},
                     "tfjob",
                     0,
                     2,
                     0,
                     1,
                     0,
                     2,
                     "m0",
                     2222},
        ContractCase{
            "nothing: a single process", {{"PATH", "/bin"}}, "single", 0, 1, 0, 1, 0, 1, "", 0}),
    [](const auto& info) {
      std::string s = info.param.label;
      for (char& ch : s) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return s;
    });

TEST(ContractDetection, VolcanoTasksNamedForRolesGiveRoles) {
  DetectedContract d = DetectContract(base::Environment(Env{
      {"VC_TASK_INDEX", "1"},
      {"HOSTNAME", "mx-server-1"},
      {"VC_SCHEDULER_HOSTS", "mx-scheduler-0.mx"},
      {"VC_SERVER_HOSTS", "mx-server-0.mx,mx-server-1.mx"},
      {"VC_WORKER_HOSTS", "mx-worker-0.mx,mx-worker-1.mx,mx-worker-2.mx"},
  }));
  ASSERT_TRUE(d.peers.has_value());
  ASSERT_TRUE(d.peers->role.has_value());
  EXPECT_EQ(*d.peers->role, Role::kServer);
  EXPECT_EQ(d.peers->rank, 1);
  EXPECT_EQ(d.peers->world_size, 2);
  EXPECT_EQ(d.peers->coordinator_host, "mx-scheduler-0.mx");
}

struct OrderCase {
  std::string label;
  Env env;
  std::string winner;
  std::vector<std::string> also_present;
};

void PrintTo(const OrderCase& c, std::ostream* os) { *os << c.label; }

class ContractOrder : public ::testing::TestWithParam<OrderCase> {};

TEST_P(ContractOrder, TheFirstMatchWinsAndTheOthersAreReported) {
  DetectedContract d = DetectContract(base::Environment(GetParam().env));
  EXPECT_EQ(d.name, GetParam().winner) << d.ToString();
  EXPECT_EQ(d.also_present, GetParam().also_present) << d.ToString();
}

const Env kSlurmLeak = {{"SLURM_JOB_ID", "7"},         {"SLURM_STEP_ID", "0"},
                        {"SLURM_PROCID", "0"},         {"SLURM_STEP_NUM_TASKS", "1"},
                        {"SLURM_STEP_NUM_NODES", "1"}, {"SLURM_NODEID", "0"},
                        {"SLURM_LOCALID", "0"},        {"SLURM_STEP_NODELIST", "n1"}};

Env With(Env base, const Env& more) {
  for (const auto& [k, v] : more) base[k] = v;
  return base;
}

INSTANTIATE_TEST_SUITE_P(
    Order, ContractOrder,
    ::testing::Values(OrderCase{"mpirun inside a Slurm allocation is MPI",
                                With(kSlurmLeak, {{"OMPI_COMM_WORLD_RANK", "1"},
                                                  {"OMPI_COMM_WORLD_SIZE", "2"},
                                                  {"MASTER_ADDR", "n1"}}),
                                "ompi",
                                {"slurm"}},
                      OrderCase{"an explicit DMLC role beats MPI",
                                {{"DMLC_ROLE", "server"},
                                 {"DMLC_PS_ROOT_URI", "127.0.0.21"},
                                 {"DMLC_PS_ROOT_PORT", "9000"},
                                 {"DMLC_NUM_SERVER", "1"},
                                 {"DMLC_NUM_WORKER", "2"},
                                 {"OMPI_COMM_WORLD_RANK", "1"},
                                 {"OMPI_COMM_WORLD_SIZE", "3"}},
                                "dmlc",
                                {"ompi"}},
                      OrderCase{
                          "TANDEM_* beats everything",
                          With(kSlurmLeak, {{"TANDEM_WORLD_SIZE", "1"}, {"TANDEM_RANK", "0"}}),
                          "tandem",
                          {"slurm"}},
                      OrderCase{"a Slurm batch shell (no step tasks) is a single process",
                                {{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "n[1-2]"}},
                                "single",
                                {}},
                      OrderCase{"torchrun inside a TrainJob pod is torchrun",
                                {{"TORCHELASTIC_RUN_ID", "x"},
                                 {"RANK", "0"},
                                 {"WORLD_SIZE", "2"},
                                 {"LOCAL_RANK", "0"},
                                 {"LOCAL_WORLD_SIZE", "2"},
                                 {"MASTER_ADDR", "m"},
                                 {"MASTER_PORT", "1"},
                                 {"PET_NNODES", "1"},
                                 {"PET_NODE_RANK", "0"},
                                 {"PET_NPROC_PER_NODE", "2"}},
                                "torchrun",
                                {"trainjob"}}));

struct BadCase {
  std::string label;
  Env env;
  std::string message;  // a part of the ConfigError's text
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.label; }

class BadContract : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadContract, FailsNamingTheVariable) {
  try {
    DetectedContract d = DetectContract(base::Environment(GetParam().env));
    ADD_FAILURE() << "accepted: " << d.ToString();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(GetParam().message), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Errors, BadContract,
    ::testing::Values(
        BadCase{"rank beyond the world",
                {{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}},
                "OMPI_COMM_WORLD_RANK"},
        BadCase{"tandem without a rank", {{"TANDEM_WORLD_SIZE", "2"}}, "TANDEM_RANK"},
        BadCase{
            "a bad coordinator",
            {{"TANDEM_WORLD_SIZE", "2"}, {"TANDEM_RANK", "0"}, {"TANDEM_COORDINATOR", "h:99999"}},
            "TANDEM_COORDINATOR"},
        BadCase{
            "torchrun without MASTER_ADDR", {{"RANK", "0"}, {"WORLD_SIZE", "2"}}, "MASTER_ADDR"},
        BadCase{
            "pytorchjob with several processes per pod and no torchrun",
            {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}, {"PET_NPROC_PER_NODE", "4"}},
            "through torchrun"},
        BadCase{"trainjob with several processes per node",
                {{"PET_NNODES", "2"},
                 {"PET_NODE_RANK", "0"},
                 {"PET_MASTER_ADDR", "m"},
                 {"PET_NPROC_PER_NODE", "auto"}},
                "PET_NPROC_PER_NODE=auto"},
        BadCase{"indexed job without WORLD_SIZE", {{"JOB_COMPLETION_INDEX", "0"}}, "WORLD_SIZE"},
        BadCase{"indexed job with a foreign host name",
                {{"JOB_COMPLETION_INDEX", "3"}, {"WORLD_SIZE", "4"}, {"HOSTNAME", "other"}},
                "HOSTNAME='other'"},
        BadCase{"slurm tasks per node disagreeing with the node count",
                With(kSlurmLeak, {{"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}}),
                "SLURM_STEP_TASKS_PER_NODE"},
        BadCase{"volcano without the svc plugin", {{"VC_TASK_INDEX", "0"}}, "svc plugin"},
        BadCase{"TF_CONFIG that is not JSON", {{"TF_CONFIG", "{cluster"}}, "TF_CONFIG is not JSON"},
        BadCase{"TF_CONFIG task index out of range",
                {{"TF_CONFIG", kTfConfigPs + R"("task": {"type": "worker", "index": 2}})"}},
                "TF_CONFIG: task.index 2 is out of range: cluster.worker lists 2 task(s)"},
        BadCase{"TF_CONFIG evaluator task",
                {{"TF_CONFIG", kTfConfigPs + R"("task": {"type": "evaluator", "index": 0}})"}},
                "does not run an evaluator"},
        BadCase{"TF_CONFIG unknown task type",
                {{"TF_CONFIG", R"({"cluster": {"worker": ["w:1"], "tpu": ["t:1"]},
                                   "task": {"type": "worker", "index": 0}})"}},
                "TF_CONFIG: cluster.tpu: task type 'tpu' is not one tandem knows"},
        BadCase{"TF_CONFIG address not a string",
                {{"TF_CONFIG", R"({"cluster": {"worker": ["w:1", 7]},
                                   "task": {"type": "worker", "index": 0}})"}},
                "TF_CONFIG: cluster.worker[1] is not a string"},
        BadCase{"TF_CONFIG sparse cluster",
                {{"TF_CONFIG", R"({"sparseCluster": {"worker": {"0": "w:1"}, "ps": []},
                                   "task": {"type": "worker", "index": 0}})"}},
                "enableDynamicWorker"},
        BadCase{"TF_CONFIG bad port",
                {{"TF_CONFIG", R"({"cluster": {"chief": ["c:70000"]},
                                   "task": {"type": "chief", "index": 0}})"}},
                "TF_CONFIG's cluster.chief[0]"},
        BadCase{"dmlc role without a scheduler port",
                {{"DMLC_ROLE", "worker"}, {"DMLC_PS_ROOT_URI", "h"}, {"DMLC_NUM_WORKER", "1"}},
                "DMLC_PS_ROOT_PORT"}));

struct HostlistCase {
  std::string text;
  std::vector<std::string> hosts;
};

class SlurmHostlist : public ::testing::TestWithParam<HostlistCase> {};

TEST_P(SlurmHostlist, ExpandsInOrderKeepingPadding) {
  EXPECT_EQ(ExpandSlurmHostlist(GetParam().text), GetParam().hosts);
}

INSTANTIATE_TEST_SUITE_P(
    Lists, SlurmHostlist,
    ::testing::Values(HostlistCase{"n1", {"n1"}}, HostlistCase{"a,b,c", {"a", "b", "c"}},
                      HostlistCase{"gpu[01-04,07],cpu[1-2]",
                                   {"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu1", "cpu2"}},
                      HostlistCase{"n[8-11]", {"n8", "n9", "n10", "n11"}},
                      HostlistCase{"n[1-2]-ib", {"n1-ib", "n2-ib"}},
                      HostlistCase{"r[1-2]n[1-2]", {"r1n1", "r1n2", "r2n1", "r2n2"}},
                      HostlistCase{"x[009-011]", {"x009", "x010", "x011"}}));

TEST(SlurmHostlist, RejectsMalformedLists) {
  for (const char* bad :
       {"", "n[1-2", "n1-2]", "n[2-1]", "n[a-b]", "a,,b", "n[[1]]", "n[1-2000000]"}) {
    EXPECT_THROW(ExpandSlurmHostlist(bad), ConfigError) << bad;
  }
}

TEST(SlurmTasksPerNode, ExpandsRepeats) {
  EXPECT_EQ(ExpandSlurmTasksPerNode("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(ExpandSlurmTasksPerNode("4"), (std::vector<int>{4}));
  for (const char* bad : {"", "x", "2(x0)", "2(x3", "0", "1,,2"}) {
    EXPECT_THROW(ExpandSlurmTasksPerNode(bad), ConfigError) << bad;
  }
}

TEST(ParseCoordinator, AcceptsHostsWithAndWithoutPorts) {
  EXPECT_EQ(ParseCoordinator("V", "h:1"), std::make_pair(std::string("h"), uint16_t{1}));
  EXPECT_EQ(ParseCoordinator("V", "h"), std::make_pair(std::string("h"), uint16_t{0}));
  EXPECT_EQ(ParseCoordinator("V", "[::1]:80"), std::make_pair(std::string("::1"), uint16_t{80}));
  EXPECT_EQ(ParseCoordinator("V", "::1"), std::make_pair(std::string("::1"), uint16_t{0}));
  for (const char* bad : {"", ":5", "h:0", "h:x", "[::1", "[::1]x"}) {
    EXPECT_THROW(ParseCoordinator("V", bad), ConfigError) << bad;
  }
}

}  // namespace
}  // namespace tandem::cluster
