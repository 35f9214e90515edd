// From a launcher's contract to the DMLC variables the cluster layer runs on
// (docs/contracts.md, "From a contract to a job").
#include "cluster/startup_environment.h"

#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <string>

#include "tandem/error.h"

namespace tandem::cluster {
namespace {

using Env = std::map<std::string, std::string>;

struct MappingCase {
  std::string label;
  Env env;
  Env want;  // every variable listed must have this value; "" means absent
};

void PrintTo(const MappingCase& c, std::ostream* os) { *os << c.label; }

class StartupMapping : public ::testing::TestWithParam<MappingCase> {};

TEST_P(StartupMapping, GivesTheDmlcVariables) {
  const MappingCase& c = GetParam();
  Env got = ResolveStartupEnvironment(base::Environment(c.env));
  for (const auto& [name, value] : c.want) {
    auto it = got.find(name);
    if (value.empty()) {
      EXPECT_TRUE(it == got.end()) << name << "=" << it->second;
    } else {
      ASSERT_TRUE(it != got.end()) << name << " missing";
      EXPECT_EQ(it->second, value) << name;
    }
  }
  ASSERT_TRUE(got.count(kResolvedContractVariable));
  // Resolving twice changes nothing.
  EXPECT_EQ(ResolveStartupEnvironment(base::Environment(got)), got);
}

Env Torchrun(int rank, int world, Env extra = {}) {
  Env e = {{"RANK", std::to_string(rank)},
           {"WORLD_SIZE", std::to_string(world)},
           {"LOCAL_RANK", std::to_string(rank % 2)},
           {"LOCAL_WORLD_SIZE", "2"},
           {"MASTER_ADDR", "127.0.0.21"},
           {"MASTER_PORT", "29400"},
           {"TORCHELASTIC_RUN_ID", "abc"},
           {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  for (const auto& [k, v] : extra) e[k] = v;
  return e;
}

// TFJob's TF_CONFIG for a chief, two workers and two ps tasks.
std::string TfConfig(const std::string& type, int index) {
  return R"({"cluster": {"chief": ["tj-chief-0.ns.svc:2222"],
                         "worker": ["tj-worker-0.ns.svc:2222", "tj-worker-1.ns.svc:2222"],
                         "ps": ["tj-ps-0.ns.svc:2222", "tj-ps-1.ns.svc:2222"]},
             "task": {"type": ")" +
         type + R"(", "index": )" + std::to_string(index) + "}}";
}

INSTANTIATE_TEST_SUITE_P(
    EveryShape, StartupMapping,
    ::testing::Values(
        MappingCase{"torchrun worker 0 hosts the rendezvous above the agent store",
                    Torchrun(0, 4),
                    {{"DMLC_ROLE", "worker"},
                     {"DMLC_WORKER_ID", "0"},
                     {"DMLC_NUM_WORKER", "4"},
                     {"DMLC_NUM_SERVER", "0"},
                     {"DMLC_PS_ROOT_URI", "127.0.0.21"},
                     {"DMLC_PS_ROOT_PORT", "29401"},
                     {"TANDEM_RENDEZVOUS_IN_PROCESS", "1"}}},
        MappingCase{"torchrun with servers: the last ranks serve",
                    Torchrun(3, 4, {{"TANDEM_NUM_SERVERS", "2"}}),
                    {{"DMLC_ROLE", "server"},
                     {"DMLC_SERVER_ID", "1"},
                     {"DMLC_WORKER_ID", ""},
                     {"DMLC_NUM_WORKER", "2"},
                     {"DMLC_NUM_SERVER", "2"}}},
        MappingCase{"torchrun with servers: the first ranks work",
                    Torchrun(1, 4, {{"DMLC_NUM_SERVER", "1"}}),
                    {{"DMLC_ROLE", "worker"},
                     {"DMLC_WORKER_ID", "1"},
                     {"DMLC_NUM_WORKER", "3"},
                     {"DMLC_NUM_SERVER", "1"}}},
        MappingCase{"TANDEM_COORDINATOR beats MASTER_ADDR",
                    Torchrun(2, 4, {{"TANDEM_COORDINATOR", "[fd00::7]:5000"}}),
                    {{"DMLC_PS_ROOT_URI", "fd00::7"}, {"DMLC_PS_ROOT_PORT", "5000"}}},
        MappingCase{"pytorchjob keeps MASTER_PORT",
                    {{"RANK", "1"},
                     {"WORLD_SIZE", "2"},
                     {"MASTER_ADDR", "job-master-0"},
                     {"MASTER_PORT", "23456"}},
                    {{"DMLC_ROLE", "worker"},
                     {"DMLC_WORKER_ID", "1"},
                     {"DMLC_PS_ROOT_URI", "job-master-0"},
                     {"DMLC_PS_ROOT_PORT", "23456"}}},
        MappingCase{"mpirun with MASTER_ADDR",
                    {{"OMPI_COMM_WORLD_RANK", "2"},
                     {"OMPI_COMM_WORLD_SIZE", "3"},
                     {"MASTER_ADDR", "127.0.0.1"},
                     {"MASTER_PORT", "4000"},
                     {"DMLC_WORKER_ID", "7"}},
                    {{"DMLC_ROLE", "worker"},
                     {"DMLC_WORKER_ID", "2"},
                     {"DMLC_NUM_WORKER", "3"},
                     {"DMLC_PS_ROOT_PORT", "4000"}}},
        MappingCase{"tandem with a role: a scheduler process at the coordinator",
                    {{"TANDEM_WORLD_SIZE", "2"},
                     {"TANDEM_RANK", "1"},
                     {"TANDEM_ROLE", "server"},
                     {"TANDEM_NUM_SERVERS", "2"},
                     {"TANDEM_NUM_WORKERS", "3"},
                     {"TANDEM_COORDINATOR", "sched:9000"}},
                    {{"DMLC_ROLE", "server"},
                     {"DMLC_SERVER_ID", "1"},
                     {"DMLC_NUM_SERVER", "2"},
                     {"DMLC_NUM_WORKER", "3"},
                     {"DMLC_PS_ROOT_URI", "sched"},
                     {"DMLC_PS_ROOT_PORT", "9000"},
                     {"TANDEM_RENDEZVOUS_IN_PROCESS", ""}}},
        MappingCase{"volcano tasks named for roles",
                    {{"VC_TASK_INDEX", "1"},
                     {"HOSTNAME", "mx-worker-1"},
                     {"VC_SCHEDULER_HOSTS", "mx-scheduler-0.mx"},
                     {"VC_SERVER_HOSTS", "mx-server-0.mx"},
                     {"VC_WORKER_HOSTS", "mx-worker-0.mx,mx-worker-1.mx,mx-worker-2.mx"}},
                    {{"DMLC_ROLE", "worker"},
                     {"DMLC_WORKER_ID", "1"},
                     {"DMLC_NUM_SERVER", "1"},
                     {"DMLC_NUM_WORKER", "3"},
                     {"DMLC_PS_ROOT_URI", "mx-scheduler-0.mx"},
                     {"DMLC_PS_ROOT_PORT", "29500"},
                     {"TANDEM_RENDEZVOUS_IN_PROCESS", ""}}},
        MappingCase{"tfjob ps task: a server, the chief hosts the rendezvous",
                    {{"TF_CONFIG", TfConfig("ps", 1)}},
                    {{"DMLC_ROLE", "server"},
                     {"DMLC_SERVER_ID", "1"},
                     {"DMLC_NUM_SERVER", "2"},
                     {"DMLC_NUM_WORKER", "3"},
                     {"DMLC_PS_ROOT_URI", "tj-chief-0.ns.svc"},
                     {"DMLC_PS_ROOT_PORT", "2222"},
                     {"TANDEM_RENDEZVOUS_IN_PROCESS", "1"}}},
        MappingCase{"tfjob chief: worker 0",
                    {{"TF_CONFIG", TfConfig("chief", 0)}},
                    {{"DMLC_ROLE", "worker"},
                     {"DMLC_WORKER_ID", "0"},
                     {"DMLC_NUM_SERVER", "2"},
                     {"DMLC_NUM_WORKER", "3"}}},
        MappingCase{"tfjob worker 1: worker 2",
                    {{"TF_CONFIG", TfConfig("worker", 1)}, {"TANDEM_NUM_SERVERS", "2"}},
                    {{"DMLC_ROLE", "worker"}, {"DMLC_WORKER_ID", "2"}, {"DMLC_NUM_SERVER", "2"}}},
        MappingCase{"a process alone: any free loopback port",
                    {},
                    {{"DMLC_ROLE", "worker"},
                     {"DMLC_WORKER_ID", "0"},
                     {"DMLC_NUM_WORKER", "1"},
                     {"DMLC_PS_ROOT_URI", "127.0.0.1"},
                     {"DMLC_PS_ROOT_PORT", "0"},
                     {"TANDEM_RENDEZVOUS_IN_PROCESS", "1"}}},
        MappingCase{"DMLC passes through",
                    {{"DMLC_ROLE", "server"},
                     {"DMLC_PS_ROOT_URI", "s"},
                     {"DMLC_PS_ROOT_PORT", "9"},
                     {"DMLC_NUM_WORKER", "2"},
                     {"DMLC_NUM_SERVER", "1"},
                     {"RANK", "5"},
                     {"WORLD_SIZE", "8"},
                     {"MASTER_ADDR", "x"}},
                    {{"DMLC_ROLE", "server"},
                     {"DMLC_PS_ROOT_PORT", "9"},
                     {"DMLC_NUM_WORKER", "2"},
                     {"DMLC_SERVER_ID", ""}}}),
    [](const auto& info) {
      std::string s = info.param.label;
      for (char& ch : s) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return s;
    });

struct RefusedCase {
  std::string label;
  Env env;
  std::string needle;
};

void PrintTo(const RefusedCase& c, std::ostream* os) { *os << c.label; }

class StartupRefusal : public ::testing::TestWithParam<RefusedCase> {};

TEST_P(StartupRefusal, NamesWhatIsMissing) {
  try {
    ResolveStartupEnvironment(base::Environment(GetParam().env));
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(GetParam().needle), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Unusable, StartupRefusal,
    ::testing::Values(RefusedCase{"peers without a coordinator",
                                  {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
                                  "ompi gives rank 0 of 2 but no rendezvous address"},
                      RefusedCase{
                          "tfjob with another server count",
                          {{"TF_CONFIG", TfConfig("worker", 0)}, {"TANDEM_NUM_SERVERS", "1"}},
                          "TANDEM_NUM_SERVERS=1 but the tfjob contract names 2 servers"},
                      RefusedCase{"no worker left", Torchrun(0, 2, {{"TANDEM_NUM_SERVERS", "2"}}),
                                  "TANDEM_NUM_SERVERS=2 leaves no worker among the 2 processes"},
                      RefusedCase{"a role without the worker count",
                                  {{"TANDEM_WORLD_SIZE", "1"},
                                   {"TANDEM_RANK", "0"},
                                   {"TANDEM_ROLE", "worker"},
                                   {"TANDEM_COORDINATOR", "h:1"}},
                                  "TANDEM_NUM_WORKERS"},
                      RefusedCase{"a role rank beyond its count",
                                  {{"TANDEM_WORLD_SIZE", "4"},
                                   {"TANDEM_RANK", "3"},
                                   {"TANDEM_ROLE", "worker"},
                                   {"TANDEM_NUM_WORKERS", "2"},
                                   {"TANDEM_COORDINATOR", "h:1"}},
                                  "worker rank 3 but the job has 2 workers"},
                      RefusedCase{"torchrun's agent store at the last port",
                                  Torchrun(0, 2, {{"MASTER_PORT", "65535"}}), "MASTER_PORT=65535"}),
    [](const auto& info) {
      std::string s = info.param.label;
      for (char& ch : s) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return s;
    });

}  // namespace
}  // namespace tandem::cluster
