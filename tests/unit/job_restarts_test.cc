// Tests of whole-job restarts (src/launch/job_restarts.h) with real
// processes (/bin/sh -c scripts): how many attempts run, what each process
// is told, the launcher's lines, and an interrupt during the delay.
#include "launch/job_restarts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "launch/mpi_launcher.h"
#include "launch/remote_exec.h"
#include "launch/slurm_launcher.h"
#include "launch/ssh_launcher.h"
#include "support/memory_file.h"
#include "tandem/error.h"

namespace tandem::launch {
namespace {

using std::chrono::milliseconds;
using tandem::testing::MemoryFile;
using ::testing::HasSubstr;
using ::testing::Not;
using Env = std::map<std::string, std::string>;

// Output to the two files; a short tear-down (the scripts never linger).
SupervisorOptions Options(const MemoryFile& out, const MemoryFile& err) {
  return {.teardown_grace = milliseconds(2000),
          .kill_delay = milliseconds(2000),
          .stdout_fd = out.fd(),
          .stderr_fd = err.fd()};
}

int CountLines(const MemoryFile& file, const std::string& needle) {
  int n = 0;
  for (const auto& line : file.Lines()) n += line.find(needle) != std::string::npos ? 1 : 0;
  return n;
}

// An attempt of two processes: "worker 0" prints what it was told and
// succeeds; "worker 1" runs `failing_script` while TANDEM_RESTART_COUNT is
// below `fail_until`, and exits 0 afterwards.
JobAttempt TwoWorkers(int fail_until, const std::string& failing_script, int* attempts) {
  return [=](ProcessSupervisor& supervisor, const Env& env) {
    ++*attempts;
    supervisor.Start({"worker 0",
                      {"/bin/sh", "-c",
                       "echo pid=$$ restart=$TANDEM_RESTART_COUNT "
                       "max=$TANDEM_MAX_RESTARTS"},
                      env});
    supervisor.Start({"worker 1",
                      {"/bin/sh", "-c",
                       "if [ \"$TANDEM_RESTART_COUNT\" -lt " + std::to_string(fail_until) +
                           " ]; then " + failing_script + "; fi"},
                      env});
    return supervisor.Run();
  };
}

TEST(AttemptEnvironmentTest, AddsTheRestartCountAndTheLimitOverInheritedValues) {
  const Env launcher = {{"PATH", "/bin"}, {"TANDEM_RESTART_COUNT", "9"}};
  EXPECT_EQ(AttemptEnvironment(launcher, 2, 5),
            (Env{{"PATH", "/bin"}, {"TANDEM_RESTART_COUNT", "2"}, {"TANDEM_MAX_RESTARTS", "5"}}));
  EXPECT_EQ(AttemptEnvironment({}, 0, 0),
            (Env{{"TANDEM_RESTART_COUNT", "0"}, {"TANDEM_MAX_RESTARTS", "0"}}));
}

// The launchers that start processes elsewhere build them from the
// attempt's environment: the restart count reaches every host and rank.
TEST(AttemptEnvironmentTest, ReachesTheProcessesOfEveryLauncher) {
  const Env env = AttemptEnvironment({{"PATH", "/bin"}}, 2, 3);
  const LocalJobIdentity id{4242, "secret-hex", "job-1"};
  LocalJobOptions job;
  job.num_workers = 1;
  job.command = {"train"};
  job.tandem_binary = "/opt/tandem";

  SshJobOptions ssh;
  ssh.job = job;
  ssh.hosts = {{"h1", "h1", 1}};
  ssh.remote_tandem = "/opt/tandem";
  ssh.remote_directory = "/work";
  for (const ProcessSpec& spec : BuildSshJob(ssh, id, env)) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    ASSERT_EQ(::write(fds[1], spec.stdin_data->data(), spec.stdin_data->size()),
              static_cast<ssize_t>(spec.stdin_data->size()));
    Env remote = ReadRemoteEnvironment(fds[0], std::chrono::seconds(5));
    ::close(fds[0]);
    ::close(fds[1]);
    EXPECT_EQ(remote["TANDEM_RESTART_COUNT"], "2") << spec.label;
    EXPECT_EQ(remote["TANDEM_MAX_RESTARTS"], "3") << spec.label;
  }

  MpiJobOptions mpi;
  mpi.job = job;
  const ProcessSpec mpirun = BuildMpirunCommand(mpi, id, env);
  EXPECT_EQ(mpirun.env.at("TANDEM_RESTART_COUNT"), "2");
  for (const char* name : {"TANDEM_RESTART_COUNT", "TANDEM_MAX_RESTARTS"}) {
    const auto& argv = mpirun.argv;
    bool forwarded = false;
    for (size_t i = 0; i + 1 < argv.size(); ++i)
      forwarded |= argv[i] == "-x" && argv[i + 1] == name;
    EXPECT_TRUE(forwarded) << name << " is not passed to the ranks with -x";
  }

  SlurmJobOptions slurm;
  slurm.job = job;
  const ProcessSpec srun = BuildSrunCommand(slurm, id, env);
  EXPECT_EQ(srun.env.at("TANDEM_MAX_RESTARTS"), "3");
  EXPECT_NE(std::find(srun.argv.begin(), srun.argv.end(), "--export=ALL"), srun.argv.end());
}

struct RestartCase {
  const char* name;
  int max_restarts;
  int fail_until;      // worker 1 fails on attempts with a restart count below this
  const char* script;  // how it fails
  RestartPolicy policy;
  int exit_code;
  int attempts;
  const char* last_line;  // a part of the launcher's last line; "" when it adds none
};

class RunWithRestartsTest : public ::testing::TestWithParam<RestartCase> {};

TEST_P(RunWithRestartsTest, RunsAsManyAttemptsAsThePolicyAllows) {
  const RestartCase& c = GetParam();
  MemoryFile out, err;
  RestartOptions restarts;
  restarts.max_restarts = c.max_restarts;
  restarts.delay = milliseconds(0);
  restarts.policy = c.policy;
  int attempts = 0;
  const int code =
      RunWithRestarts(restarts, Options(out, err), base::Environment(Env{{"PATH", "/bin"}}),
                      TwoWorkers(c.fail_until, c.script, &attempts));
  EXPECT_EQ(code, c.exit_code) << err.Text();
  EXPECT_EQ(attempts, c.attempts) << err.Text();
  // Every attempt's processes were told its number and the limit.
  for (int k = 0; k < c.attempts; ++k) {
    EXPECT_EQ(
        CountLines(out, "restart=" + std::to_string(k) + " max=" + std::to_string(c.max_restarts)),
        1)
        << out.Text();
  }
  EXPECT_EQ(CountLines(err, "[launcher] restarting the job (restart "), c.attempts - 1)
      << err.Text();
  for (int k = 1; k < c.attempts; ++k) {
    EXPECT_EQ(CountLines(err, "(restart " + std::to_string(k) + " of " +
                                  std::to_string(c.max_restarts) + ") after worker 1 (pid "),
              1)
        << err.Text();
  }
  const auto lines = err.Lines();
  ASSERT_FALSE(lines.empty());
  if (*c.last_line != '\0') {
    EXPECT_THAT(lines.back(), HasSubstr(c.last_line)) << err.Text();
  } else {
    EXPECT_THAT(err.Text(), Not(HasSubstr("restart"))) << err.Text();
  }
}

constexpr const char* kKill = "kill -9 $$";
constexpr auto kExitCode = RestartPolicy::kExitCode;
constexpr auto kOnFailure = RestartPolicy::kOnFailure;

INSTANTIATE_TEST_SUITE_P(
    Cases, RunWithRestartsTest,
    ::testing::Values(
        RestartCase{"SucceedsAfterOneRestart", 3, 1, kKill, kExitCode, 0, 2,
                    "job succeeded after 1 restart"},
        RestartCase{"SucceedsAfterTwoRestarts", 2, 2, kKill, kExitCode, 0, 3,
                    "job succeeded after 2 restarts"},
        RestartCase{"NoFailureNoRestart", 3, 0, kKill, kExitCode, 0, 1, ""},
        RestartCase{"WithoutMaxRestartsOneAttemptAsBefore", 0, 1, kKill, kExitCode, 137, 1, ""},
        RestartCase{"ExhaustedExitsWithTheLastFailure", 2, 99, "exit 202", kExitCode, 202, 3,
                    "job failed after 3 attempts, no restart left (--max-restarts 2): attempt 1: "
                    "worker 1 (pid "},
        RestartCase{"ConfigErrorIsNotRestarted", 3, 1, "exit 78", kExitCode, 78, 1,
                    "not restarting the job: worker 1 (pid "},
        RestartCase{"ExitOneIsNotRestartedUnderExitCode", 3, 1, "exit 1", kExitCode, 1, 1,
                    "a permanent failure"},
        RestartCase{"ExitOneIsRestartedUnderOnFailure", 3, 1, "exit 1", kOnFailure, 0, 2,
                    "job succeeded after 1 restart"},
        RestartCase{"UsageErrorIsNotRestartedUnderOnFailure", 3, 1, "exit 2", kOnFailure, 2, 1,
                    "a usage error"}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(RunWithRestartsTest, APermanentFailureAfterRestartsNamesEveryAttempt) {
  MemoryFile out, err;
  RestartOptions restarts;
  restarts.max_restarts = 5;
  restarts.delay = milliseconds(0);
  int attempts = 0;
  // Killed on the first attempt, a configuration error on the second.
  const int code = RunWithRestarts(
      restarts, Options(out, err), base::Environment(Env{{"PATH", "/bin"}}),
      TwoWorkers(2, "if [ $TANDEM_RESTART_COUNT = 0 ]; then kill -9 $$; else exit 78; fi",
                 &attempts));
  EXPECT_EQ(code, 78) << err.Text();
  EXPECT_EQ(attempts, 2);
  const std::string last = err.Lines().back();
  EXPECT_THAT(last, HasSubstr("not restarting the job: worker 1 (pid "));
  EXPECT_THAT(last, HasSubstr("a configuration error, which a restart cannot fix (attempt 1: "
                              "worker 1 (pid "));
  EXPECT_THAT(last, HasSubstr("killed by signal 9 (SIGKILL); attempt 2: worker 1 (pid "));
}

TEST(RunWithRestartsTest, AnInterruptDuringTheDelayStopsAtOnce) {
  MemoryFile out, err;
  RestartOptions restarts;
  restarts.max_restarts = 3;
  restarts.delay = milliseconds(60000);  // far longer than the test waits
  int attempts = 0;
  const JobAttempt fail_then_interrupt = [&](ProcessSupervisor& supervisor, const Env& env) {
    ++attempts;
    supervisor.Start({"worker 0", {"/bin/sh", "-c", "kill -9 $$"}, env});
    JobOutcome outcome = supervisor.Run();
    // Ctrl-C right after the attempt ended: pending for this thread, which
    // the supervisor has SIGINT blocked in.
    ::pthread_kill(::pthread_self(), SIGINT);
    return outcome;
  };
  const auto start = std::chrono::steady_clock::now();
  const int code = RunWithRestarts(restarts, Options(out, err),
                                   base::Environment(Env{{"PATH", "/bin"}}), fail_then_interrupt);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_EQ(code, 137) << err.Text();
  EXPECT_EQ(attempts, 1);
  EXPECT_THAT(err.Lines().back(),
              HasSubstr("received SIGINT during the restart delay; not restarting the job "
                        "(attempt 1: worker 0 (pid "));
}

TEST(RunWithRestartsTest, LaterAttemptsAppendToTheLogFiles) {
  MemoryFile out, err;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("job-restarts-logs-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    // A log of an earlier job in the same directory is truncated by the first attempt.
    std::ofstream(dir / "worker-1.log") << "an earlier job\n";
  }
  SupervisorOptions options = Options(out, err);
  options.log_dir = dir.string();
  RestartOptions restarts;
  restarts.max_restarts = 2;
  restarts.delay = milliseconds(0);
  int attempts = 0;
  const int code = RunWithRestarts(
      restarts, options, base::Environment(Env{{"PATH", "/bin"}}),
      TwoWorkers(1, "echo attempt $TANDEM_RESTART_COUNT fails; kill -9 $$", &attempts));
  EXPECT_EQ(code, 0) << err.Text();
  std::ifstream log(dir / "worker-1.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "attempt 0 fails\n");  // attempt 1 succeeds silently, after it
  std::ifstream log0(dir / "worker-0.log");
  const std::string text0((std::istreambuf_iterator<char>(log0)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text0, ::testing::MatchesRegex("pid=[0-9]+ restart=0 max=2\npid=[0-9]+ restart=1 "
                                             "max=2\n"));
  std::filesystem::remove_all(dir);
}

// Replacements of single workers (SupervisorOptions::replace_departed_workers)
// and restarts of the job share --max-restarts: an attempt that replaced a
// worker and then failed below the minimum has used the only restart.
TEST(RunWithRestartsTest, ReplacementsOfWorkersCountAgainstTheRestarts) {
  MemoryFile out, err;
  SupervisorOptions options = Options(out, err);
  options.min_workers = 2;
  options.replace_departed_workers = true;
  options.max_replacements = 1;
  options.replacement_delay = milliseconds(0);
  RestartOptions restarts;
  restarts.max_restarts = 1;
  restarts.delay = milliseconds(0);
  int attempts = 0;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("job-restarts-share-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string replaced = (dir / "replaced").string();
  // Worker 2 dies and is replaced; its replacement (restart count 1) marks
  // the file; then worker 1 dies (2 of 3 remain: no replacement left) and
  // worker 0 is killed (1 of 3: below the minimum), a retryable failure.
  const JobAttempt attempt = [&](ProcessSupervisor& supervisor, const Env& env) {
    ++attempts;
    const std::string wait = "while [ ! -e " + replaced + " ]; do sleep 0.02; done; ";
    supervisor.Start({"worker 2",
                      {"/bin/sh", "-c",
                       "echo worker 2 count $TANDEM_RESTART_COUNT; if [ $TANDEM_RESTART_COUNT = "
                       "0 ]; then kill -9 $$; fi; touch " +
                           replaced + "; exec sleep 30"},
                      env});
    supervisor.Start({"worker 1", {"/bin/sh", "-c", wait + "kill -9 $$"}, env});
    supervisor.Start({"worker 0", {"/bin/sh", "-c", wait + "sleep 0.3; kill -9 $$"}, env});
    return supervisor.Run();
  };
  const int code =
      RunWithRestarts(restarts, options, base::Environment(Env{{"PATH", "/bin"}}), attempt);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(code, 137) << err.Text();
  EXPECT_EQ(attempts, 1) << err.Text();
  EXPECT_EQ(CountLines(out, "worker 2 count 1"), 1) << out.Text();
  EXPECT_THAT(err.Text(), HasSubstr("[launcher] not replacing worker 1: no replacement left (1 of "
                                    "1 used)"));
  EXPECT_THAT(err.Lines().back(),
              HasSubstr("job failed after 1 attempts and 1 replacement of workers, no restart "
                        "left (--max-restarts 1): attempt 1: worker 0 (pid "));
}

TEST(RunWithRestartsTest, InvalidOptionsAreRefusedBeforeAnythingStarts) {
  MemoryFile out, err;
  RestartOptions restarts;
  restarts.max_restarts = -2;
  int attempts = 0;
  EXPECT_THROW(RunWithRestarts(restarts, Options(out, err), base::Environment(Env{}),
                               TwoWorkers(0, kKill, &attempts)),
               InvalidArgument);
  EXPECT_EQ(attempts, 0);
}

TEST(WaitForInterruptTest, WaitsTheWholeDurationWithoutASignal) {
  MemoryFile out, err;
  ProcessSupervisor supervisor(Options(out, err));
  EXPECT_THROW(supervisor.WaitForInterrupt(milliseconds(0)), InvalidArgument);  // before Run
  supervisor.Start({"worker 0", {"/bin/sh", "-c", "exit 0"}, {}});
  ASSERT_EQ(supervisor.Run().exit_code, 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(supervisor.WaitForInterrupt(milliseconds(300)), 0);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(300));
}

TEST(TornDownTest, TheSupervisorMarksTheEndsItsTearDownBrought) {
  MemoryFile out, err;
  SupervisorOptions options = Options(out, err);
  options.teardown_grace = milliseconds(100);
  ProcessSupervisor supervisor(options);
  supervisor.Start({"worker 0", {"/bin/sh", "-c", "exit 3"}, {}});
  supervisor.Start({"worker 1", {"/bin/sleep", "30"}, {}});
  const JobOutcome outcome = supervisor.Run();
  ASSERT_EQ(outcome.exits.size(), 2u) << err.Text();
  EXPECT_EQ(outcome.exits[0].label, "worker 0");
  EXPECT_FALSE(outcome.exits[0].torn_down);
  EXPECT_EQ(outcome.exits[1].label, "worker 1");
  EXPECT_EQ(outcome.exits[1].status.signal, SIGTERM) << err.Text();
  EXPECT_TRUE(outcome.exits[1].torn_down);
  // So the cause is the exit 3, whatever the order of the reports.
  EXPECT_EQ(AttemptCause(outcome)->label, "worker 0");
}

class WaitForInterruptSignalTest : public ::testing::TestWithParam<int> {};

TEST_P(WaitForInterruptSignalTest, ReturnsTheInterruptThatArrived) {
  MemoryFile out, err;
  ProcessSupervisor supervisor(Options(out, err));
  supervisor.Start({"worker 0", {"/bin/sh", "-c", "exit 0"}, {}});
  ASSERT_EQ(supervisor.Run().exit_code, 0);
  ::pthread_kill(::pthread_self(), GetParam());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(supervisor.WaitForInterrupt(milliseconds(60000)), GetParam());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

INSTANTIATE_TEST_SUITE_P(Signals, WaitForInterruptSignalTest,
                         ::testing::Values(SIGINT, SIGTERM, SIGHUP));

}  // namespace
}  // namespace tandem::launch
