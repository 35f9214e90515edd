// The pieces of the Grid Engine launcher that need no cell: $PE_HOSTFILE,
// the placement on the granted slots, the `qrsh -inherit` commands with
// each task's contract on stdin, and the qrsh that submits the job from
// outside one.
#include "launch/sge_launcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "launch/remote_exec.h"
#include "tandem/error.h"

namespace tandem::launch {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
using Env = std::map<std::string, std::string>;

TEST(PeHostfile, ReadsHostsAndSlotsAndAddsUpAHostOfTwoQueues) {
  auto hosts = ParsePeHostfile(
      "node07.cluster 4 all.q@node07.cluster UNDEFINED\n"
      "\n"
      "node03 2 all.q@node03 0,1\n"
      "node07.cluster 1 short.q@node07.cluster UNDEFINED\n",
      "PE_HOSTFILE /spool/pe_hostfile");
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].host, "node07.cluster");
  EXPECT_EQ(hosts[0].login, "node07.cluster");
  EXPECT_EQ(hosts[0].slots, 5);
  EXPECT_EQ(hosts[1].host, "node03");
  EXPECT_EQ(hosts[1].slots, 2);
}

class BadPeHostfile : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(BadPeHostfile, NamesTheFileTheLineAndTheProblem) {
  try {
    ParsePeHostfile(GetParam().first, "PE_HOSTFILE /p");
    FAIL() << "accepted " << GetParam().first;
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr(GetParam().second));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadPeHostfile,
    ::testing::Values(
        std::make_pair("a 2 q@a UNDEFINED\nb\n",
                       "PE_HOSTFILE /p line 2: 'b' is not 'HOST SLOTS QUEUE PROCESSORS' with a "
                       "positive slot count"),
        std::make_pair("a 0 q@a UNDEFINED\n", "line 1: 'a 0 q@a UNDEFINED'"),
        std::make_pair("a two q@a UNDEFINED\n", "line 1: 'a two q@a UNDEFINED'"),
        std::make_pair("a 2x q@a UNDEFINED\n", "line 1: 'a 2x q@a UNDEFINED'"),
        std::make_pair("\n\n", "PE_HOSTFILE /p names no host")));

TEST(PeHostfile, AFileThatCannotBeReadIsNamed) {
  try {
    ReadPeHostfile("/nonexistent/pe_hostfile");
    FAIL() << "read a file that does not exist";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("PE_HOSTFILE=/nonexistent/pe_hostfile: cannot read it"));
  }
}

std::vector<HostSlots> Granted() { return {{"n1", "n1", 2}, {"n2", "n2", 3}, {"n3", "n3", 1}}; }

TEST(PlaceSgeJob, FillsTheGrantedSlotsInOrder) {
  EXPECT_EQ(PlaceSgeJob(Granted(), 6), (std::vector<size_t>{0, 0, 1, 1, 1, 2}));
  EXPECT_EQ(PlaceSgeJob(Granted(), 3), (std::vector<size_t>{0, 0, 1}));
}

TEST(PlaceSgeJob, MoreProcessesThanSlotsAreRefusedWithTheSlotsToAskFor) {
  try {
    PlaceSgeJob(Granted(), 7);
    FAIL() << "placed 7 processes on 6 slots";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("the job has 7 processes but Grid Engine granted 6 slots"));
    EXPECT_THAT(e.what(), HasSubstr("submit with -pe PE 7"));
  }
}

SgeJobOptions Options(int workers, int servers, bool no_scheduler = false) {
  SgeJobOptions o;
  o.job.num_workers = workers;
  o.job.num_servers = servers;
  o.job.rendezvous_in_worker = no_scheduler;
  o.job.command = {"/bin/train", "--epochs", "3"};
  o.job.tandem_binary = "/opt/tandem/bin/tandem";
  o.job.job_id = "job-9";
  o.job.env = {{"OMP_NUM_THREADS", "2"}};
  return o;
}

LocalJobIdentity Identity() {
  LocalJobIdentity id{41000, "s3cr3t-value", "job-9"};
  id.master_port = 41001;
  return id;
}

// The contract a task gets: the header remote-exec reads from its stdin.
std::map<std::string, std::string> ContractOf(const ProcessSpec& spec) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  EXPECT_EQ(::write(fds[1], spec.stdin_data->data(), spec.stdin_data->size()),
            static_cast<ssize_t>(spec.stdin_data->size()));
  auto env = ReadRemoteEnvironment(fds[0], std::chrono::seconds(5));
  ::close(fds[0]);
  ::close(fds[1]);
  return env;
}

TEST(BuildSgeJob, EveryProcessIsAQrshInheritTaskOnItsSlotWithItsContractOnStdin) {
  // a scheduler, 1 server, 4 workers on n1 (2 slots), n2 (3), n3 (1)
  const std::map<std::string, std::string> launcher_env = {
      {"PATH", "/venv/bin:/bin"},   {"TANDEM_SECRET", "users-own"},
      {"DMLC_WORKER_ID", "5"},      {"RANK", "9"},
      {"PE_HOSTFILE", "/spool/pe"}, {kSgeInnerLauncherVariable, "1"},
      {"PS_VERBOSE", "1"},          {"TANDEM_MIN_WORKERS", "2"}};
  auto specs = BuildSgeJob(Options(4, 1), Granted(), Identity(), launcher_env, "/home/u/run");
  ASSERT_EQ(specs.size(), 6u);
  const std::vector<std::string> labels = {"scheduler", "server 0", "worker 0",
                                           "worker 1",  "worker 2", "worker 3"};
  const std::vector<std::string> hosts = {"n1", "n1", "n2", "n2", "n2", "n3"};
  for (size_t i = 0; i < specs.size(); ++i) {
    const ProcessSpec& s = specs[i];
    EXPECT_EQ(s.label, labels[i]);
    EXPECT_EQ(s.host, hosts[i]);
    EXPECT_EQ(s.service, i < 2) << s.label;
    const std::vector<std::string> head = {
        "qrsh",        "-inherit", "-V",      "-noshell", hosts[i],      "/opt/tandem/bin/tandem",
        "remote-exec", "--label",  labels[i], "--cwd",    "/home/u/run", "--"};
    ASSERT_GT(s.argv.size(), head.size());
    EXPECT_EQ(std::vector<std::string>(s.argv.begin(), s.argv.begin() + head.size()), head);
    for (const auto& a : s.argv) EXPECT_THAT(a, Not(HasSubstr("s3cr3t")));
    // What qrsh -V hands to the task: the launcher's environment, without a
    // secret (spooled where others may read it) or per-process values.
    EXPECT_EQ(s.env.at("PATH"), "/venv/bin:/bin");
    EXPECT_EQ(s.env.at("PS_VERBOSE"), "1");
    // An inherited TANDEM_MIN_WORKERS would make the job's scheduler let
    // workers leave a job that Grid Engine ends when one task fails.
    for (const char* kept : {"TANDEM_SECRET", "DMLC_WORKER_ID", "RANK", kSgeInnerLauncherVariable,
                             "TANDEM_MIN_WORKERS"}) {
      EXPECT_EQ(s.env.count(kept), 0u) << s.label << " " << kept;
    }
    const auto contract = ContractOf(s);
    EXPECT_EQ(contract.at("TANDEM_SECRET"), "s3cr3t-value");
    EXPECT_EQ(contract.at("TANDEM_JOB_ID"), "job-9");
    EXPECT_EQ(contract.at("DMLC_PS_ROOT_URI"), "n1");
    EXPECT_EQ(contract.at("DMLC_PS_ROOT_PORT"), "41000");
    EXPECT_EQ(contract.at("DMLC_NUM_SERVER"), "1");
    EXPECT_EQ(contract.at("DMLC_NUM_WORKER"), "4");
    EXPECT_EQ(contract.at("OMP_NUM_THREADS"), "2");   // --env
    EXPECT_EQ(contract.count("DMLC_NODE_HOST"), 0u);  // the route to the scheduler decides
    EXPECT_EQ(contract.count("TANDEM_MIN_WORKERS"), 0u) << s.label;
  }
  EXPECT_EQ(std::vector<std::string>(specs[0].argv.begin() + 12, specs[0].argv.end()),
            (std::vector<std::string>{"/opt/tandem/bin/tandem", "scheduler"}));
  EXPECT_EQ(std::vector<std::string>(specs[5].argv.begin() + 12, specs[5].argv.end()),
            (std::vector<std::string>{"/bin/train", "--epochs", "3"}));
  EXPECT_EQ(ContractOf(specs[0]).at("DMLC_ROLE"), "scheduler");
  EXPECT_EQ(ContractOf(specs[1]).at("DMLC_SERVER_ID"), "0");
  // Workers 0..2 on n2, worker 3 on n3; torchrun's view of them.
  const auto w2 = ContractOf(specs[4]);
  EXPECT_EQ(w2.at("DMLC_ROLE"), "worker");
  EXPECT_EQ(w2.at("DMLC_WORKER_ID"), "2");
  EXPECT_EQ(w2.at("RANK"), "2");
  EXPECT_EQ(w2.at("WORLD_SIZE"), "4");
  EXPECT_EQ(w2.at("LOCAL_RANK"), "2");
  EXPECT_EQ(w2.at("LOCAL_WORLD_SIZE"), "3");
  EXPECT_EQ(w2.at("GROUP_RANK"), "0");
  EXPECT_EQ(w2.at("MASTER_ADDR"), "n2");
  EXPECT_EQ(w2.at("MASTER_PORT"), "41001");
  const auto w3 = ContractOf(specs[5]);
  EXPECT_EQ(w3.at("LOCAL_RANK"), "0");
  EXPECT_EQ(w3.at("LOCAL_WORLD_SIZE"), "1");
  EXPECT_EQ(w3.at("GROUP_RANK"), "1");
  EXPECT_EQ(w3.at("GROUP_WORLD_SIZE"), "2");
  EXPECT_EQ(ContractOf(specs[0]).count("RANK"), 0u);  // stale copies never reach the scheduler
}

TEST(BuildSgeJob, ACollectivesJobPutsWorkerZeroOnTheFirstSlot) {
  auto specs = BuildSgeJob(Options(3, 0, true), Granted(), Identity(), {}, "/w");
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].label, "worker 0");
  EXPECT_EQ(specs[0].host, "n1");
  EXPECT_EQ(specs[2].host, "n2");
  const auto w0 = ContractOf(specs[0]);
  EXPECT_EQ(w0.at("TANDEM_RENDEZVOUS_IN_PROCESS"), "1");
  EXPECT_EQ(w0.at("DMLC_PS_ROOT_URI"), "n1");
  EXPECT_EQ(ContractOf(specs[2]).at("MASTER_ADDR"), "n1");
}

TEST(BuildSgeSubmission, SubmitsTheSameLaunchIntoTheParallelEnvironment) {
  SgeJobOptions o = Options(4, 1);
  o.parallel_environment = "mpi";
  o.submit_args = {"-q", "gpu.q"};
  o.scheduler_port = 23456;
  o.teardown_grace_ms = 2500;
  o.log_dir = "/home/u/logs";
  o.job.restarts.max_restarts = 2;
  o.job.restarts.delay = std::chrono::milliseconds(200);
  ProcessSpec spec =
      BuildSgeSubmission(o, {{"PATH", "/bin"}, {"TANDEM_SECRET", "users-own"}, {"HOME", "/h"}});
  EXPECT_EQ(spec.argv, (std::vector<std::string>{"qrsh",
                                                 "-now",
                                                 "no",
                                                 "-pe",
                                                 "mpi",
                                                 "6",
                                                 "-cwd",
                                                 "-V",
                                                 "-noshell",
                                                 "-N",
                                                 "tandem",
                                                 "-q",
                                                 "gpu.q",
                                                 "/opt/tandem/bin/tandem",
                                                 "launch",
                                                 "--launcher",
                                                 "sge",
                                                 "-n",
                                                 "4",
                                                 "-s",
                                                 "1",
                                                 "--job-id",
                                                 "job-9",
                                                 "--teardown-grace",
                                                 "2.500",
                                                 "--scheduler-port",
                                                 "23456",
                                                 "--log-dir",
                                                 "/home/u/logs",
                                                 "--max-restarts",
                                                 "2",
                                                 "--restart-delay",
                                                 "0.200",
                                                 "--restart-policy",
                                                 "exit-code",
                                                 "--env",
                                                 "OMP_NUM_THREADS=2",
                                                 "--",
                                                 "/bin/train",
                                                 "--epochs",
                                                 "3"}));
  EXPECT_FALSE(spec.prefix_output);
  EXPECT_TRUE(spec.stop_with_two_sigints);  // qrsh ends on SIGINT, not on SIGTERM
  EXPECT_EQ(spec.env.at(kSgeInnerLauncherVariable), "1");
  EXPECT_EQ(spec.env.at("HOME"), "/h");
  EXPECT_EQ(spec.env.count("TANDEM_SECRET"), 0u);
}

TEST(BuildSgeSubmission, ACollectivesJobAsksForASlotPerWorker) {
  SgeJobOptions o = Options(3, 0, true);
  o.parallel_environment = "smp";
  o.job.command_runs_all_roles = true;
  ProcessSpec spec = BuildSgeSubmission(o, {});
  auto at = std::find(spec.argv.begin(), spec.argv.end(), "-pe");
  ASSERT_NE(at, spec.argv.end());
  EXPECT_EQ(*(at + 1), "smp");
  EXPECT_EQ(*(at + 2), "3");
  EXPECT_THAT(spec.argv, Contains("--no-scheduler"));
  EXPECT_THAT(spec.argv, Contains("--command-runs-all-roles"));
  EXPECT_THAT(spec.argv, Not(Contains("-s")));
  EXPECT_THAT(spec.argv, Not(Contains("--max-restarts")));
}

TEST(RunSgeJob, OutsideAJobWithoutAParallelEnvironmentSaysHowToSubmit) {
  SgeJobOptions o = Options(2, 1);
  try {
    RunSgeJob(o, SupervisorOptions{}, base::Environment(Env{{"PATH", "/bin"}}));
    FAIL() << "ran without a parallel environment";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("give the parallel environment with --sge-pe PE (its 4 "
                                    "slots: a scheduler, 1 server and 2 workers)"));
  }
}

TEST(RunSgeJob, InsideAJobSubmittingOptionsAndAMissingJobIdAreRefused) {
  SgeJobOptions o = Options(2, 1);
  o.parallel_environment = "mpi";
  try {
    RunSgeJob(o, SupervisorOptions{},
              base::Environment(Env{{"PE_HOSTFILE", "/spool/pe"}, {"JOB_ID", "12"}}));
    FAIL() << "accepted --sge-pe inside a job";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("already runs inside job 12 (PE_HOSTFILE=/spool/pe)"));
  }
  o.parallel_environment.clear();
  try {
    RunSgeJob(o, SupervisorOptions{}, base::Environment(Env{{"PE_HOSTFILE", "/spool/pe"}}));
    FAIL() << "accepted a job without JOB_ID";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("PE_HOSTFILE=/spool/pe is set but JOB_ID is not"));
  }
}

}  // namespace
}  // namespace tandem::launch
