// MXJob's MX_CONFIG read with the DMLC contract: the JSON training-operator
// writes for each role fills what DMLC_* leaves out, must agree with what
// it gives, and malformed or ill-shaped JSON is refused naming MX_CONFIG.
#include "cluster/mx_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>

#include "base/environment.h"
#include "cluster/contract_detection.h"
#include "cluster/dmlc_contract.h"
#include "tandem/error.h"

namespace tandem::cluster {
namespace {

using Env = std::map<std::string, std::string>;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// What training-operator writes for job "mx" with `servers` servers and
// `workers` workers, port 9091, for the pod of `type` and `index`.
std::string OperatorMxConfig(const std::string& type, int index, int servers, int workers) {
  auto entries = [](const std::string& role, int n) {
    std::string out = "[";
    for (int i = 0; i < n; ++i) {
      out += (i ? "," : "") + std::string(R"({"url":"mx-)") + role + "-" + std::to_string(i) +
             R"(","port":9091})";
    }
    return out + "]";
  };
  return R"({"cluster":{"scheduler":)" + entries("scheduler", 1) + R"(,"server":)" +
         entries("server", servers) + R"(,"worker":)" + entries("worker", workers) +
         R"(},"labels":{"scheduler":"","server":"","worker":""},"task":{"type":")" + type +
         R"(","index":)" + std::to_string(index) + "}}";
}

// The DMLC_* the operator sets next to it.
Env OperatorDmlc(const std::string& type, int index, int servers, int workers) {
  Env env{{"DMLC_ROLE", type},
          {"DMLC_PS_ROOT_URI", "mx-scheduler-0"},
          {"DMLC_PS_ROOT_PORT", "9091"},
          {"DMLC_NUM_SERVER", std::to_string(servers)},
          {"DMLC_NUM_WORKER", std::to_string(workers)},
          {"DMLC_USE_KUBERNETES", "1"}};
  if (type == "worker") env["DMLC_WORKER_ID"] = std::to_string(index);
  return env;
}

// role, index, servers, workers
using Pod = std::tuple<std::string, int, int, int>;

class MxConfigRoles : public ::testing::TestWithParam<Pod> {
 protected:
  void Check(const Env& env) {
    const std::string type = std::get<0>(GetParam());
    const int index = std::get<1>(GetParam());
    const int servers = std::get<2>(GetParam());
    const int workers = std::get<3>(GetParam());
    ProcessDescription d = ParseDmlcContract(base::Environment(env));
    EXPECT_EQ(std::string(RoleName(d.role)), type);
    EXPECT_EQ(d.scheduler_host, "mx-scheduler-0");
    EXPECT_EQ(d.scheduler_port, 9091);
    EXPECT_EQ(d.num_servers, servers);
    EXPECT_EQ(d.num_workers, workers);
    EXPECT_EQ(d.requested_rank, type == "scheduler" ? -1 : index);
    DetectedContract detected = DetectContract(base::Environment(env));
    EXPECT_EQ(detected.name, "dmlc");
    ASSERT_TRUE(detected.dmlc.has_value());
    EXPECT_EQ(detected.dmlc->num_workers, workers);
  }
};

TEST_P(MxConfigRoles, AgreesWithTheOperatorsDmlcVariables) {
  Env env = OperatorDmlc(std::get<0>(GetParam()), std::get<1>(GetParam()), std::get<2>(GetParam()),
                         std::get<3>(GetParam()));
  env["MX_CONFIG"] = OperatorMxConfig(std::get<0>(GetParam()), std::get<1>(GetParam()),
                                      std::get<2>(GetParam()), std::get<3>(GetParam()));
  Check(env);
}

TEST_P(MxConfigRoles, FillsWhatDmlcLeavesOut) {
  // MX_CONFIG alone: every DMLC_* variable comes from it.
  Check({{"MX_CONFIG", OperatorMxConfig(std::get<0>(GetParam()), std::get<1>(GetParam()),
                                        std::get<2>(GetParam()), std::get<3>(GetParam()))}});
}

TEST_P(MxConfigRoles, ADisagreementNamesBothValues) {
  const std::string type = std::get<0>(GetParam());
  const int index = std::get<1>(GetParam());
  const int servers = std::get<2>(GetParam());
  const int workers = std::get<3>(GetParam());
  Env env = OperatorDmlc(type, index, servers, workers);
  env["MX_CONFIG"] = OperatorMxConfig(type, index, servers, workers + 1);
  EXPECT_THAT([&] { ParseDmlcContract(base::Environment(env)); },
              ThrowsMessage<ConfigError>(HasSubstr("DMLC_NUM_WORKER=" + std::to_string(workers) +
                                                   " but MX_CONFIG's cluster.worker gives " +
                                                   std::to_string(workers + 1))));
  env["MX_CONFIG"] =
      OperatorMxConfig(type == "worker" ? "server" : "worker", index, servers, workers);
  EXPECT_THAT([&] { ParseDmlcContract(base::Environment(env)); },
              ThrowsMessage<ConfigError>(HasSubstr("DMLC_ROLE=" + type +
                                                   " but MX_CONFIG's "
                                                   "task.type gives")));
}

INSTANTIATE_TEST_SUITE_P(Pods, MxConfigRoles,
                         ::testing::Values(Pod{"scheduler", 0, 2, 3}, Pod{"server", 0, 2, 3},
                                           Pod{"server", 1, 2, 3}, Pod{"worker", 0, 2, 3},
                                           Pod{"worker", 2, 2, 3}, Pod{"worker", 0, 0, 1},
                                           Pod{"scheduler", 0, 1, 8}));

TEST(MxConfig, SchedulerAddressMustAgree) {
  Env env = OperatorDmlc("worker", 0, 1, 2);
  env["DMLC_PS_ROOT_URI"] = "127.0.0.9";
  env["MX_CONFIG"] = OperatorMxConfig("worker", 0, 1, 2);
  EXPECT_THAT([&] { ParseDmlcContract(base::Environment(env)); },
              ThrowsMessage<ConfigError>(HasSubstr(
                  "DMLC_PS_ROOT_URI=127.0.0.9 but MX_CONFIG's cluster.scheduler[0].url gives "
                  "mx-scheduler-0")));
}

// A malformed or ill-shaped MX_CONFIG and a part of the error's text.
using BadJson = std::tuple<const char*, const char*>;

class MxConfigRefuses : public ::testing::TestWithParam<BadJson> {};

TEST_P(MxConfigRefuses, NamesMxConfigAndTheProblem) {
  Env env{{"MX_CONFIG", std::get<0>(GetParam())}};
  const std::string want = std::get<1>(GetParam());
  EXPECT_THAT([&] { ParseDmlcContract(base::Environment(env)); },
              ThrowsMessage<ConfigError>(HasSubstr(want)));
}

INSTANTIATE_TEST_SUITE_P(
    Json, MxConfigRefuses,
    ::testing::Values(
        BadJson{R"({"cluster": {)", "MX_CONFIG is not valid JSON: [json.exception.parse_error"},
        BadJson{"", "MX_CONFIG is not valid JSON"},
        BadJson{"[1]", "MX_CONFIG: (the top level) is not an object"},
        BadJson{R"({"task":{"type":"worker","index":0}})", "MX_CONFIG: cluster is missing"},
        BadJson{R"({"cluster":{},"task":{"index":0}})", "MX_CONFIG: task.type is missing"},
        BadJson{R"({"cluster":{},"task":{"type":"worker","index":-1}})",
                "MX_CONFIG: task.index is -1"},
        BadJson{R"({"cluster":{"worker":{}},"task":{"type":"worker","index":0}})",
                "MX_CONFIG: cluster.worker is not an array"},
        BadJson{R"({"cluster":{"worker":[{"url":"w","port":"80"}]},"task":{"type":"worker",)"
                R"("index":0}})",
                "MX_CONFIG: cluster.worker[0].port is not an integer: \"80\""},
        BadJson{R"({"cluster":{"scheduler":[{"port":9}]},"task":{"type":"worker","index":0}})",
                "MX_CONFIG: cluster.scheduler[0].url is missing"},
        BadJson{R"({"cluster":{"worker":[{"url":"w","port":1}]},"task":{"type":"worker",)"
                R"("index":0}})",
                "DMLC_PS_ROOT_URI is not set"}));

}  // namespace
}  // namespace tandem::cluster
