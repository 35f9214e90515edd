// tandem launch's command line in every launcher's spelling: the counts
// and hosts resolved (launch_plan) and -H lists (hostfile).
#include "launch/launch_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
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

// The plan for `request` over the hosts of `host_list` (may be empty), or
// nothing after checking that planning fails with `error` when one is given.
std::optional<LaunchPlan> PlanOrExpectError(const LaunchRequest& request,
                                            const std::string& host_list,
                                            const std::string& error) {
  std::vector<HostSlots> hosts;
  if (!host_list.empty()) hosts = ParseHostList(host_list);
  if (error.empty()) return PlanLaunch(request, hosts);
  try {
    PlanLaunch(request, hosts);
    ADD_FAILURE() << "accepted; expected an error with: " << error;
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr(error));
  }
  return std::nullopt;
}

class PlanLaunchTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(PlanLaunchTest, ResolvesOrNamesTheDisagreement) {
  const PlanCase& c = GetParam();
  const std::optional<LaunchPlan> planned = PlanOrExpectError(c.request, c.host_list, c.error);
  if (!planned) return;
  const LaunchPlan& plan = *planned;
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

// --workers MIN:MAX (and --workers N) against the other counts and the
// launchers: the plan's workers and minimum, or the error's words.
struct ElasticPlanCase {
  const char* name;
  LaunchRequest request;
  std::string host_list;
  std::string launcher;
  int workers;
  int min_workers;
  std::string error;
};

class PlanElasticTest : public ::testing::TestWithParam<ElasticPlanCase> {};

TEST_P(PlanElasticTest, ResolvesTheRangeOrNamesTheProblem) {
  const ElasticPlanCase& c = GetParam();
  const std::optional<LaunchPlan> planned = PlanOrExpectError(c.request, c.host_list, c.error);
  if (!planned) return;
  const LaunchPlan& plan = *planned;
  EXPECT_EQ(plan.launcher, c.launcher);
  EXPECT_EQ(plan.num_workers, c.workers);
  EXPECT_EQ(plan.min_workers, c.min_workers);
}

// A parameter-server job of --workers MIN:MAX under `launcher` (given).
LaunchRequest Elastic(int min, int max, const char* launcher = "local") {
  return LaunchRequest{.launcher = launcher,
                       .launcher_given = true,
                       .num_servers = 1,
                       .servers_given = true,
                       .min_workers = min,
                       .max_workers = max};
}

LaunchRequest With(LaunchRequest r, int num_workers, int nproc_per_node = 0) {
  r.num_workers = num_workers;
  r.nproc_per_node = nproc_per_node;
  return r;
}

LaunchRequest Without(LaunchRequest r, bool servers_given, bool no_scheduler) {
  r.servers_given = servers_given;
  r.num_servers = servers_given ? r.num_servers : 0;
  r.no_scheduler = no_scheduler;
  return r;
}

const std::string kNeedsLocalOrSsh =
    "ends the whole job when one rank fails: elastic worker counts need --launcher local or ssh";

INSTANTIATE_TEST_SUITE_P(
    Ranges, PlanElasticTest,
    ::testing::Values(
        ElasticPlanCase{"Local", Elastic(3, 4), "", "local", 4, 3, ""},
        ElasticPlanCase{"WithoutAMinimumEveryWorkerCounts", LaunchRequest{.num_workers = 4}, "",
                        "local", 4, 4, ""},
        ElasticPlanCase{"OneCountIsDashN", Elastic(4, 4, "mpi"), "", "mpi", 4, 4, ""},
        ElasticPlanCase{"DashNEqualToMax", With(Elastic(3, 4), 4), "", "local", 4, 3, ""},
        ElasticPlanCase{"DashNDisagreesWithMax", With(Elastic(3, 4), 3), "", "", 0, 0,
                        "-n/-np 3 disagrees with --workers 3:4, which starts 4 workers"},
        ElasticPlanCase{"DashNDisagreesWithOneCount", With(Elastic(5, 5), 4), "", "", 0, 0,
                        "-n/-np 4 disagrees with --workers 5, which starts 5 workers"},
        ElasticPlanCase{"NprocAgreeing", With(Elastic(1, 2), 0, 2), "", "local", 2, 1, ""},
        ElasticPlanCase{"NprocDisagreeing", With(Elastic(2, 3), 0, 2), "", "", 0, 0,
                        "--workers 2:3 disagrees with --nproc-per-node 2 x --nnodes 1 = 2 workers"},
        ElasticPlanCase{
            "OverOtherHostsIsSsh",
            LaunchRequest{
                .num_servers = 1, .servers_given = true, .min_workers = 2, .max_workers = 4},
            "h1:2,h2:2", "ssh", 4, 2, ""},
        ElasticPlanCase{"Ssh", Elastic(2, 4, "ssh"), "h1:2,h2:2", "ssh", 4, 2, ""},
        ElasticPlanCase{"Mpi", Elastic(3, 4, "mpi"), "", "", 0, 0,
                        "--workers 3:4 lets workers leave the job, but under --launcher mpi "
                        "mpirun " +
                            kNeedsLocalOrSsh},
        ElasticPlanCase{"Slurm", Elastic(3, 4, "slurm"), "", "", 0, 0,
                        "under --launcher slurm srun " + kNeedsLocalOrSsh},
        ElasticPlanCase{"GridEngine", Elastic(3, 4, "sge"), "", "", 0, 0,
                        "under --launcher sge Grid Engine (qrsh) " + kNeedsLocalOrSsh},
        ElasticPlanCase{"WithoutServers", Without(Elastic(3, 4), false, false), "", "", 0, 0,
                        "--workers 3:4 lets workers leave a parameter-server job, which needs its "
                        "scheduler as a process of its own: give -s SERVERS; without -s worker 0 "
                        "hosts the rendezvous"},
        ElasticPlanCase{"NoScheduler", Without(Elastic(3, 4), false, true), "", "", 0, 0,
                        "give -s SERVERS instead of --no-scheduler; with --no-scheduler worker 0 "
                        "hosts the rendezvous"},
        ElasticPlanCase{
            "ZeroServersHaveAScheduler",
            LaunchRequest{
                .launcher = "local", .servers_given = true, .min_workers = 1, .max_workers = 2},
            "", "local", 2, 1, ""}),
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
