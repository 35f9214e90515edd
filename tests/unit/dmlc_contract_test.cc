// The DMLC start-up contract: what each variable does and the errors for
// missing or bad ones.
#include "cluster/dmlc_contract.h"

#include <gtest/gtest.h>

#include "cluster/node_address.h"
#include "tandem/error.h"

namespace tandem::cluster {
namespace {

std::map<std::string, std::string> Base(const std::string& role) {
  return {{"DMLC_ROLE", role},
          {"DMLC_PS_ROOT_URI", "10.1.2.3"},
          {"DMLC_PS_ROOT_PORT", "9091"},
          {"DMLC_NUM_SERVER", "2"},
          {"DMLC_NUM_WORKER", "4"}};
}

TEST(DmlcContract, ParsesEveryRole) {
  for (auto [text, role] :
       {std::pair{"scheduler", Role::kScheduler}, std::pair{"server", Role::kServer},
        std::pair{"worker", Role::kWorker}}) {
    auto d = ParseDmlcContract(base::Environment(Base(text)));
    EXPECT_EQ(d.role, role);
    EXPECT_EQ(d.scheduler_host, "10.1.2.3");
    EXPECT_EQ(d.scheduler_port, 9091);
    EXPECT_EQ(d.num_servers, 2);
    EXPECT_EQ(d.num_workers, 4);
    EXPECT_EQ(d.requested_rank, -1);
    EXPECT_EQ(d.contract, "dmlc");
  }
}

TEST(DmlcContract, OptionalVariables) {
  auto env = Base("worker");
  env["DMLC_NODE_HOST"] = "worker-3.svc";
  env["DMLC_INTERFACE"] = "eth1";
  env["DMLC_USE_KUBERNETES"] = "1";
  env["DMLC_WORKER_ID"] = "3";
  auto d = ParseDmlcContract(base::Environment(env));
  EXPECT_EQ(d.node_host, "worker-3.svc");
  EXPECT_EQ(d.interface, "eth1");
  EXPECT_TRUE(d.use_kubernetes);
  EXPECT_EQ(d.requested_rank, 3);
}

struct BadCase {
  std::string variable;
  std::string value;  // "<unset>" removes it
  std::string role;
  std::string expected_in_error;
};

class DmlcContractErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(DmlcContractErrors, NameTheVariable) {
  const auto& c = GetParam();
  auto env = Base(c.role);
  if (c.value == "<unset>") {
    env.erase(c.variable);
  } else {
    env[c.variable] = c.value;
  }
  try {
    ParseDmlcContract(base::Environment(env));
    FAIL() << "accepted " << c.variable << "=" << c.value;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(c.expected_in_error), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DmlcContractErrors,
    ::testing::Values(BadCase{"DMLC_ROLE", "boss", "worker", "DMLC_ROLE='boss'"},
                      BadCase{"DMLC_PS_ROOT_URI", "<unset>", "worker", "DMLC_PS_ROOT_URI"},
                      BadCase{"DMLC_PS_ROOT_PORT", "<unset>", "worker", "DMLC_PS_ROOT_PORT"},
                      BadCase{"DMLC_PS_ROOT_PORT", "70000", "worker", "DMLC_PS_ROOT_PORT=70000"},
                      BadCase{"DMLC_PS_ROOT_PORT", "x1", "worker", "DMLC_PS_ROOT_PORT='x1'"},
                      BadCase{"DMLC_NUM_WORKER", "0", "worker", "DMLC_NUM_WORKER=0"},
                      BadCase{"DMLC_NUM_WORKER", "<unset>", "server", "DMLC_NUM_WORKER"},
                      BadCase{"DMLC_NUM_SERVER", "0", "server", "DMLC_NUM_SERVER=0"},
                      BadCase{"DMLC_WORKER_ID", "4", "worker", "DMLC_WORKER_ID=4"},
                      BadCase{"DMLC_SERVER_ID", "2", "server", "DMLC_SERVER_ID=2"},
                      BadCase{"DMLC_USE_KUBERNETES", "maybe", "scheduler", "DMLC_USE_KUBERNETES"}));

TEST(NodeAddress, NodeHostWinsOverInterface) {
  auto env = Base("worker");
  env["DMLC_NODE_HOST"] = "192.0.2.7";
  env["DMLC_INTERFACE"] = "no-such-interface";
  base::Logger log("test");
  EXPECT_EQ(SelectNodeHost(ParseDmlcContract(base::Environment(env)), std::chrono::seconds(1), log),
            "192.0.2.7");
}

TEST(NodeAddress, InterfaceAddressOfLoopback) { EXPECT_EQ(InterfaceAddress("lo"), "127.0.0.1"); }

TEST(NodeAddress, UnknownInterfaceListsTheKnownOnes) {
  try {
    InterfaceAddress("no-such-if0");
    FAIL();
  } catch (const ConfigError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("no-such-if0"), std::string::npos);
    EXPECT_NE(what.find("lo"), std::string::npos) << what;
  }
}

TEST(NodeAddress, RouteToLoopbackSchedulerIsLoopback) {
  base::Logger log("test");
  EXPECT_EQ(RouteSourceAddress("127.0.0.1", 9000, std::chrono::seconds(1), log), "127.0.0.1");
  // localhost resolves from /etc/hosts, never through DNS.
  std::string local = RouteSourceAddress("localhost", 9000, std::chrono::seconds(1), log);
  EXPECT_TRUE(local.rfind("127.", 0) == 0 || local == "::1") << local;
}

TEST(NodeAddress, IpLiterals) {
  EXPECT_TRUE(IsIpLiteral("127.0.0.1"));
  EXPECT_TRUE(IsIpLiteral("::1"));
  EXPECT_FALSE(IsIpLiteral("localhost"));
  EXPECT_FALSE(IsIpLiteral("10.0.0.256"));
}

}  // namespace
}  // namespace tandem::cluster
