// tandem launch's command line in every launcher's spelling: the counts
// and hosts resolved (launch_plan) and -H lists (hostfile).
#include "launch/launch_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "launch/hostfile.h"
#include "tandem/error.h"

namespace tandem::launch {
namespace {

using ::testing::HasSubstr;

// One command line: its request and -H list ("" for none), and either the
// plan (launcher, workers, slots per planned host) or the error's words.
struct PlanCase {
  const char* name;
  LaunchRequest request;
  std::string host_list;
  std::string launcher;
  int workers;
  std::vector<int> slots;
  std::string error;
};

class PlanLaunchTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(PlanLaunchTest, ResolvesOrNamesTheDisagreement) {
  const PlanCase& c = GetParam();
  std::vector<HostSlots> hosts;
  if (!c.host_list.empty()) hosts = ParseHostList(c.host_list);
  if (!c.error.empty()) {
    try {
      PlanLaunch(c.request, hosts);
      ADD_FAILURE() << "accepted; expected an error with: " << c.error;
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr(c.error));
    }
    return;
  }
  const LaunchPlan plan = PlanLaunch(c.request, hosts);
  EXPECT_EQ(plan.launcher, c.launcher);
  EXPECT_EQ(plan.num_workers, c.workers);
  std::vector<int> slots;
  for (const auto& h : plan.hosts) slots.push_back(h.slots);
  EXPECT_EQ(slots, c.slots);
}

INSTANTIATE_TEST_SUITE_P(
    Spellings, PlanLaunchTest,
    ::testing::Values(
        PlanCase{"DashN", LaunchRequest{.num_workers = 3}, "", "local", 3, {}, ""},
        PlanCase{"NprocPerNode", LaunchRequest{.nproc_per_node = 2}, "", "local", 2, {}, ""},
        PlanCase{"NprocTimesOneNode",
                 LaunchRequest{.nproc_per_node = 2, .nnodes = 1},
                 "",
                 "local",
                 2,
                 {},
                 ""},
        PlanCase{"NAgreeingWithNproc",
                 LaunchRequest{.launcher = "slurm",
                               .launcher_given = true,
                               .num_workers = 4,
                               .nproc_per_node = 2,
                               .nnodes = 2},
                 "",
                 "slurm",
                 4,
                 {},
                 ""},
        PlanCase{"SlotsOfThisHostAreDashN", LaunchRequest{}, "localhost:2", "local", 2, {}, ""},
        PlanCase{"NOverridesTheSlots",
                 LaunchRequest{.num_workers = 3},
                 "localhost:2",
                 "local",
                 3,
                 {},
                 ""},
        PlanCase{"OtherHostsImplySsh", LaunchRequest{}, "h1:2,h2:2", "ssh", 4, {2, 2}, ""},
        PlanCase{"MpiKeepsItsHosts",
                 LaunchRequest{.launcher = "mpi", .launcher_given = true},
                 "h1:3,h2",
                 "mpi",
                 4,
                 {3, 1},
                 ""},
        PlanCase{"NprocSetsEveryHostsSlots",
                 LaunchRequest{.nproc_per_node = 3, .nnodes = 2},
                 "h1,h2:5",
                 "ssh",
                 6,
                 {3, 3},
                 ""},
        PlanCase{"NoCount", LaunchRequest{}, "", "", 0, {}, "how many workers? give -n N"},
        PlanCase{"NDisagreesWithNproc",
                 LaunchRequest{.num_workers = 3, .nproc_per_node = 2},
                 "",
                 "",
                 0,
                 {},
                 "-n 3 disagrees with --nproc-per-node 2 x --nnodes 1 = 2 workers"},
        PlanCase{"NnodesWithTheLocalLauncher",
                 LaunchRequest{.nproc_per_node = 2, .nnodes = 2},
                 "",
                 "",
                 0,
                 {},
                 "--nnodes 2: the local launcher starts the job on this host only; use "
                 "--launcher slurm"},
        PlanCase{"NnodesAgainstTheHosts",
                 LaunchRequest{.nproc_per_node = 1, .nnodes = 3},
                 "h1,h2",
                 "",
                 0,
                 {},
                 "--nnodes 3 but -H/--hostfile names 2 hosts"},
        PlanCase{"NnodesUnderGridEngine",
                 LaunchRequest{
                     .launcher = "sge", .launcher_given = true, .nproc_per_node = 2, .nnodes = 2},
                 "",
                 "",
                 0,
                 {},
                 "--nnodes 2: under Grid Engine the parallel environment places the slots on "
                 "hosts (its allocation_rule)"},
        PlanCase{"NoSchedulerWithServers",
                 LaunchRequest{.num_workers = 2, .num_servers = 1, .no_scheduler = true},
                 "",
                 "",
                 0,
                 {},
                 "--no-scheduler starts only the workers, but -s asks for 1 server"}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

// -H lists as horovodrun and mpirun write them; errors name the entry.
struct HostListCase {
  const char* name;
  std::string list;
  std::vector<std::string> hosts;
  std::vector<int> slots;
  std::string error;
};

class HostListTest : public ::testing::TestWithParam<HostListCase> {};

TEST_P(HostListTest, ParsesEntriesOrNamesTheBadOne) {
  const HostListCase& c = GetParam();
  if (!c.error.empty()) {
    try {
      ParseHostList(c.list);
      ADD_FAILURE() << "accepted " << c.list;
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr(c.error));
    }
    return;
  }
  std::vector<std::string> hosts;
  std::vector<int> slots;
  for (const auto& h : ParseHostList(c.list)) {
    hosts.push_back(h.login);
    slots.push_back(h.slots);
  }
  EXPECT_EQ(hosts, c.hosts);
  EXPECT_EQ(slots, c.slots);
}

INSTANTIATE_TEST_SUITE_P(
    Lists, HostListTest,
    ::testing::Values(
        HostListCase{"TwoHosts", "host1:2,host2:2", {"host1", "host2"}, {2, 2}, ""},
        HostListCase{"DefaultSlot", "localhost", {"localhost"}, {1}, ""},
        HostListCase{"LoginAndIpv6", "alice@n4:3,[fd00::5]:2", {"alice@n4", "fd00::5"}, {3, 2}, ""},
        HostListCase{"BadSlots", "localhost:x", {}, {}, "-H localhost:x entry 1: slot count 'x'"},
        HostListCase{"Repeated", "h1:2,h1:2", {}, {}, "-H h1:2,h1:2 entry 2: host h1 is listed"},
        HostListCase{"EmptyEntryIsSkipped", "h1,,h2", {"h1", "h2"}, {1, 1}, ""},
        HostListCase{"Nothing", ",", {}, {}, "names no host"}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace tandem::launch
