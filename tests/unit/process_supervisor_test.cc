// Tests of the process supervisor with real children (/bin/sh -c scripts):
// output prefixing, exit codes, the tear-down policy, process groups and
// signal forwarding.
#include "launch/process_supervisor.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launch/restart_policy.h"
#include "support/memory_file.h"
#include "tandem/error.h"

namespace tandem::launch {
namespace {

using std::chrono::milliseconds;
using ::testing::ContainerEq;
using ::testing::HasSubstr;
using ::testing::Not;

using tandem::testing::MemoryFile;

std::map<std::string, std::string> BaseEnv() {
  return {{"PATH", "/usr/local/bin:/usr/bin:/bin"}, {"LC_ALL", "C"}};
}

ProcessSpec Shell(std::string label, std::string script,
                  std::map<std::string, std::string> env = BaseEnv()) {
  return {std::move(label), {"/bin/sh", "-c", std::move(script)}, std::move(env)};
}

SupervisorOptions Options(const MemoryFile& out, const MemoryFile& err) {
  SupervisorOptions o;
  o.stdout_fd = out.fd();
  o.stderr_fd = err.fd();
  o.teardown_grace = milliseconds(5000);
  o.kill_delay = milliseconds(5000);
  return o;
}

bool GroupGone(pid_t pgid) { return ::kill(-pgid, 0) != 0 && errno == ESRCH; }
bool ProcessGone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

// The index of the first line containing `needle`, or -1.
int LineIndex(const std::vector<std::string>& lines, const std::string& needle) {
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find(needle) != std::string::npos) return static_cast<int>(i);
  }
  return -1;
}

const ProcessExit* FindExit(const JobOutcome& outcome, const std::string& label) {
  for (const auto& e : outcome.exits) {
    if (e.label == label) return &e;
  }
  return nullptr;
}

TEST(ProcessSupervisorTest, PrefixesEveryLineWithTheLabel) {
  MemoryFile out, err;
  JobOutcome outcome;
  pid_t pid0 = 0;
  {
    ProcessSupervisor supervisor(Options(out, err));
    pid0 = supervisor.Start(Shell("worker 0", "echo alpha; echo beta; echo oops >&2"));
    supervisor.Start(Shell("server 1", "echo gamma"));
    outcome = supervisor.Run();
  }
  EXPECT_EQ(outcome.exit_code, 0);
  EXPECT_FALSE(outcome.first_failure.has_value());
  ASSERT_EQ(outcome.exits.size(), 2u);

  auto out_lines = out.Lines();
  EXPECT_NE(LineIndex(out_lines, "[worker 0] alpha"), -1);
  EXPECT_LT(LineIndex(out_lines, "[worker 0] alpha"), LineIndex(out_lines, "[worker 0] beta"));
  EXPECT_NE(LineIndex(out_lines, "[server 1] gamma"), -1);
  EXPECT_EQ(out_lines.size(), 3u) << out.Text();

  auto err_lines = err.Lines();
  EXPECT_NE(LineIndex(err_lines, "[worker 0] oops"), -1) << err.Text();
  EXPECT_NE(LineIndex(err_lines, "[launcher] worker 0 (pid " + std::to_string(pid0) +
                                     ") exited with status 0"),
            -1)
      << err.Text();
  // The exit report follows the process's last line.
  EXPECT_LT(LineIndex(err_lines, "[worker 0] oops"), LineIndex(err_lines, "[launcher] worker 0"));
}

// --log-dir: each process's stdout and stderr lines, unprefixed, in its own
// file named for its label; the console output is unchanged.
TEST(ProcessSupervisorTest, WritesEachProcessesOutputToItsLogFile) {
  MemoryFile out, err;
  char dir_template[] = "/tmp/tandem-logs-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  SupervisorOptions options = Options(out, err);
  options.log_dir = dir;
  {
    ProcessSupervisor supervisor(options);
    supervisor.Start(Shell("worker 1", "echo one; echo two >&2; printf partial"));
    supervisor.Start(Shell("server 0", "echo s"));
    EXPECT_EQ(supervisor.Run().exit_code, 0);
  }
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  const std::string worker = read(dir + "/worker-1.log");
  EXPECT_THAT(worker, HasSubstr("one\n"));
  EXPECT_THAT(worker, HasSubstr("two\n"));
  EXPECT_THAT(worker, HasSubstr("partial\n"));
  EXPECT_EQ(worker.size(), std::string("one\ntwo\npartial\n").size());
  EXPECT_EQ(read(dir + "/server-0.log"), "s\n");
  EXPECT_THAT(out.Lines(), ::testing::Contains("[worker 1] one"));
  std::filesystem::remove_all(dir);

  // A directory that is not there: Start fails naming the process and path.
  SupervisorOptions missing = Options(out, err);
  missing.log_dir = dir + "/no/such/dir";
  ProcessSupervisor supervisor(missing);
  try {
    supervisor.Start(Shell("worker 0", "true"));
    ADD_FAILURE() << "Start succeeded without a log directory";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("worker 0"));
    EXPECT_THAT(e.what(), HasSubstr("worker-0.log"));
  }
}

TEST(ProcessSupervisorTest, AnExitNamesTheHostOfARemoteProcess) {
  MemoryFile out, err;
  ProcessSupervisor supervisor(Options(out, err));
  ProcessSpec remote = Shell("worker 3", "exit 4");
  remote.host = "node7";
  supervisor.Start(remote);
  JobOutcome outcome = supervisor.Run();
  EXPECT_EQ(outcome.exit_code, 4);
  ASSERT_TRUE(outcome.first_failure.has_value());
  EXPECT_THAT(outcome.first_failure->Describe(), HasSubstr("worker 3 on node7 (pid "));
  EXPECT_THAT(err.Text(), HasSubstr("job failed: worker 3 on node7 (pid "));
}

TEST(ProcessSupervisorTest, LogFileNamesAreTheLabelsWithDashes) {
  EXPECT_EQ(LogFileName("scheduler"), "scheduler.log");
  EXPECT_EQ(LogFileName("worker 12"), "worker-12.log");
  EXPECT_EQ(LogFileName("a/b c"), "a-b-c.log");
}

// Services (scheduler, servers) end on their own after the workers: one
// that outlives the workers' clean exits by the grace period is stuck (the
// workers never joined), and the job is torn down with exit code 201;
// services that end within the grace leave the job successful.
struct ServiceCase {
  const char* name;
  const char* service_script;
  int exit_code;
};

class ProcessSupervisorServices : public ::testing::TestWithParam<ServiceCase> {};

TEST_P(ProcessSupervisorServices, AServiceOutlivingTheWorkersIsStuck) {
  const ServiceCase& c = GetParam();
  MemoryFile out, err;
  SupervisorOptions options = Options(out, err);
  options.teardown_grace = milliseconds(700);
  ProcessSupervisor supervisor(options);
  ProcessSpec service = Shell("server 0", c.service_script);
  service.service = true;
  supervisor.Start(service);
  supervisor.Start(Shell("worker 0", "exit 0"));
  supervisor.Start(Shell("worker 1", "sleep 0.2"));
  auto start = std::chrono::steady_clock::now();
  JobOutcome outcome = supervisor.Run();
  EXPECT_EQ(outcome.exit_code, c.exit_code) << err.Text();
  EXPECT_FALSE(outcome.first_failure.has_value()) << err.Text();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
  const bool stuck = c.exit_code != 0;
  EXPECT_EQ(err.Text().find("server 0 is still running after 0.7 s") != std::string::npos, stuck)
      << err.Text();
}

INSTANTIATE_TEST_SUITE_P(Cases, ProcessSupervisorServices,
                         ::testing::Values(ServiceCase{"stuck", "sleep 30", 201},
                                           ServiceCase{"ends_after_the_workers", "sleep 0.5", 0},
                                           ServiceCase{"ends_first", "exit 0", 0}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ProcessSupervisorTest, FlushesAPartialLastLineAndJoinsLinesSplitAcrossWrites) {
  MemoryFile out, err;
  JobOutcome outcome;
  {
    ProcessSupervisor supervisor(Options(out, err));
    supervisor.Start(Shell("worker 0", "printf 'ab'; sleep 0.1; printf 'cd\\nno newline'"));
    supervisor.Start(Shell("worker 1", "printf 'tail' >&2"));
    outcome = supervisor.Run();
  }
  EXPECT_EQ(outcome.exit_code, 0);
  EXPECT_EQ(out.Text(), "[worker 0] abcd\n[worker 0] no newline\n");
  EXPECT_NE(LineIndex(err.Lines(), "[worker 1] tail"), -1) << err.Text();
}

TEST(ProcessSupervisorTest, InterleavedStdoutAndStderrLinesStayWhole) {
  MemoryFile out, err;
  const std::string payload(5000, 'x');  // longer than PIPE_BUF and a pipe read's worth
  auto env = BaseEnv();
  env["PAYLOAD"] = payload;
  const std::string script =
      "i=0; while [ $i -lt 60 ]; do echo \"out $i $PAYLOAD\"; echo \"err $i $PAYLOAD\" >&2; "
      "i=$((i+1)); done";
  JobOutcome outcome;
  {
    ProcessSupervisor supervisor(Options(out, err));
    supervisor.Start(Shell("worker 0", script, env));
    supervisor.Start(Shell("worker 1", script, env));
    outcome = supervisor.Run();
  }
  ASSERT_EQ(outcome.exit_code, 0);
  const std::regex out_line("\\[worker [01]\\] out ([0-9]+) " + payload);
  const std::regex err_line("\\[worker [01]\\] err ([0-9]+) " + payload);
  int out_count = 0;
  for (const auto& line : out.Lines()) {
    ASSERT_TRUE(std::regex_match(line, out_line))
        << "mangled stdout line of " << line.size() << " bytes: " << line.substr(0, 80);
    ++out_count;
  }
  int err_count = 0;
  for (const auto& line : err.Lines()) {
    if (line.rfind("[launcher]", 0) == 0) continue;
    ASSERT_TRUE(std::regex_match(line, err_line))
        << "mangled stderr line of " << line.size() << " bytes: " << line.substr(0, 80);
    ++err_count;
  }
  EXPECT_EQ(out_count, 120);
  EXPECT_EQ(err_count, 120);
}

TEST(ProcessSupervisorTest, PassesArgvUntouchedAndTheEnvironmentExactly) {
  MemoryFile out, err;
  std::map<std::string, std::string> env = {{"ONLY", "this"}, {"SPACED", "a b  c"}};
  {
    ProcessSupervisor supervisor(Options(out, err));
    supervisor.Start({"worker 0", {"/usr/bin/env"}, env});
    supervisor.Start(
        {"worker 1", {"/usr/bin/printf", "%s|", "a b", "$HOME", "'q'", "", "*"}, BaseEnv()});
    EXPECT_EQ(supervisor.Run().exit_code, 0);
  }
  std::vector<std::string> env_lines;
  std::string printed;
  for (const auto& line : out.Lines()) {
    if (line.rfind("[worker 0] ", 0) == 0) env_lines.push_back(line.substr(11));
    if (line.rfind("[worker 1] ", 0) == 0) printed = line.substr(11);
  }
  std::sort(env_lines.begin(), env_lines.end());
  EXPECT_THAT(env_lines, ContainerEq(std::vector<std::string>{"ONLY=this", "SPACED=a b  c"}));
  EXPECT_EQ(printed, "a b|$HOME|'q'||*|");
}

TEST(ProcessSupervisorTest, ExitCodeIsTheFirstFailure) {
  MemoryFile out, err;
  JobOutcome outcome;
  pid_t first = 0;
  {
    ProcessSupervisor supervisor(Options(out, err));
    first = supervisor.Start(Shell("worker 2", "exit 3"));
    // Fails too, but only once the launcher has reaped worker 2 (kill -0
    // succeeds on a zombie), and within the grace period.
    supervisor.Start(Shell("worker 5", "while kill -0 " + std::to_string(first) +
                                           " 2>/dev/null; do sleep 0.02; done; exit 4"));
    outcome = supervisor.Run();
  }
  EXPECT_EQ(outcome.exit_code, 3);
  ASSERT_TRUE(outcome.first_failure.has_value());
  EXPECT_EQ(outcome.first_failure->label, "worker 2");
  EXPECT_EQ(outcome.first_failure->pid, first);
  const ProcessExit* other = FindExit(outcome, "worker 5");
  ASSERT_NE(other, nullptr);
  // It ended on its own within the grace period: never signalled.
  EXPECT_FALSE(other->status.signaled);
  EXPECT_EQ(other->status.code, 4);

  auto lines = err.Lines();
  const std::string who = "worker 2 (pid " + std::to_string(first) + ")";
  EXPECT_NE(LineIndex(lines, "[launcher] " + who + " exited with status 3; tearing down the job"),
            -1)
      << err.Text();
  EXPECT_EQ(LineIndex(lines, "SIGTERM"), -1) << err.Text();
  ASSERT_FALSE(lines.empty());
  // The cause first, then the other process that failed on its own.
  EXPECT_EQ(lines.back(),
            "[launcher] job failed: " + who + " exited with status 3; then " + other->Describe());
}

// A survivor's PeerLost (200) reaped before the failure it reports is not
// the cause: the final line and the exit code are the cause's, with the last
// line it wrote to its standard error.
TEST(ProcessSupervisorTest, TheFinalLineNamesTheCauseAndItsLastWordsBeforeALostPeer) {
  MemoryFile out, err;
  JobOutcome outcome;
  pid_t survivor = 0;
  pid_t cause = 0;
  {
    ProcessSupervisor supervisor(Options(out, err));
    survivor = supervisor.Start(
        Shell("server 0", "echo 'tandem server: error: lost worker 1' >&2; exit 200"));
    // Ends once server 0 was reaped (kill -0 succeeds on a zombie).
    cause = supervisor.Start(
        Shell("worker 1", "while kill -0 " + std::to_string(survivor) +
                              " 2>/dev/null; do sleep 0.02; done; echo 'train: checkpoint file /x: "
                              "damaged' >&2; echo >&2; exit 78"));
    outcome = supervisor.Run();
  }
  ASSERT_TRUE(outcome.first_failure.has_value());
  EXPECT_EQ(outcome.first_failure->label, "server 0");  // seen first
  EXPECT_EQ(outcome.exit_code, 78);                     // but the cause's code
  auto lines = err.Lines();
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back(), "[launcher] job failed: worker 1 (pid " + std::to_string(cause) +
                              ") exited with status 78: train: checkpoint file /x: damaged; "
                              "then server 0 (pid " +
                              std::to_string(survivor) + ") exited with status 200");
}

TEST(ProcessSupervisorTest, DeathBySignalGives128PlusTheSignal) {
  MemoryFile out, err;
  JobOutcome outcome;
  pid_t pid = 0;
  {
    ProcessSupervisor supervisor(Options(out, err));
    pid = supervisor.Start(Shell("worker 1", "kill -9 $$"));
    outcome = supervisor.Run();
  }
  EXPECT_EQ(outcome.exit_code, 128 + SIGKILL);
  ASSERT_TRUE(outcome.first_failure.has_value());
  EXPECT_TRUE(outcome.first_failure->status.signaled);
  EXPECT_EQ(outcome.first_failure->status.signal, SIGKILL);
  auto lines = err.Lines();
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back(), "[launcher] job failed: worker 1 (pid " + std::to_string(pid) +
                              ") killed by signal 9 (SIGKILL)");
}

// A launcher started with SIGINT ignored (a background job of a script)
// must not pass that on: its children die of the SIGINT it forwards.
TEST(ProcessSupervisorTest, ChildrenTakeSigintEvenWhenTheLauncherIgnoresIt) {
  MemoryFile out, err;
  JobOutcome outcome;
  struct sigaction ignore {
  }, saved{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGINT, &ignore, &saved), 0);
  {
    ProcessSupervisor supervisor(Options(out, err));
    pid_t pid = supervisor.Start(Shell("worker 0", "exec sleep 30"));
    std::thread interrupter([pid] {
      std::this_thread::sleep_for(milliseconds(200));
      ::kill(pid, SIGINT);
    });
    outcome = supervisor.Run();
    interrupter.join();
  }
  ::sigaction(SIGINT, &saved, nullptr);
  ASSERT_TRUE(outcome.first_failure.has_value());
  EXPECT_TRUE(outcome.first_failure->status.signaled);
  EXPECT_EQ(outcome.first_failure->status.signal, SIGINT);
  EXPECT_EQ(outcome.exit_code, 128 + SIGINT);
}

TEST(ProcessSupervisorTest, GraceThenSigtermThenSigkill) {
  MemoryFile out, err;
  SupervisorOptions options = Options(out, err);
  options.teardown_grace = milliseconds(300);
  options.kill_delay = milliseconds(300);
  JobOutcome outcome;
  pid_t stubborn = 0, polite = 0;
  {
    ProcessSupervisor supervisor(options);
    // The trap makes the shell and its sleeps ignore SIGTERM.
    stubborn = supervisor.Start(Shell("worker 1", "trap '' TERM; while :; do sleep 0.05; done"));
    polite = supervisor.Start(Shell("server 0", "exec sleep 1000"));
    supervisor.Start(Shell("worker 0", "sleep 0.2; exit 1"));
    outcome = supervisor.Run();
  }
  EXPECT_EQ(outcome.exit_code, 1);
  ASSERT_TRUE(outcome.first_failure.has_value());
  EXPECT_EQ(outcome.first_failure->label, "worker 0");

  const ProcessExit* s = FindExit(outcome, "worker 1");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->status.signaled);
  EXPECT_EQ(s->status.signal, SIGKILL);
  const ProcessExit* p = FindExit(outcome, "server 0");
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(p->status.signaled);
  EXPECT_EQ(p->status.signal, SIGTERM);

  auto lines = err.Lines();
  int failed = LineIndex(lines, "tearing down the job");
  int term = LineIndex(lines, "still running after the grace period of 0.3 s; sending SIGTERM");
  int kill = LineIndex(lines, "after SIGTERM; sending SIGKILL");
  ASSERT_NE(failed, -1) << err.Text();
  ASSERT_NE(term, -1) << err.Text();
  ASSERT_NE(kill, -1) << err.Text();
  EXPECT_LT(failed, term);
  EXPECT_LT(term, kill);
  EXPECT_TRUE(GroupGone(stubborn));
  EXPECT_TRUE(GroupGone(polite));
}

TEST(ProcessSupervisorTest, GrandchildrenInTheGroupAreGoneAfterwards) {
  MemoryFile out, err;
  SupervisorOptions options = Options(out, err);
  options.teardown_grace = milliseconds(200);
  options.kill_delay = milliseconds(500);
  JobOutcome outcome;
  pid_t failing = 0, waiting = 0, leaving = 0;
  {
    ProcessSupervisor supervisor(options);
    // Exits at once, leaving a grandchild behind in its group.
    leaving = supervisor.Start(Shell("worker 0", "sleep 1000 & echo grandchild $!"));
    // Waits for its grandchild: both get SIGTERM after the grace period.
    waiting = supervisor.Start(Shell("worker 1", "sleep 1000 & echo grandchild $!; wait"));
    failing = supervisor.Start(Shell("worker 2", "sleep 0.3; exit 2"));
    outcome = supervisor.Run();
  }
  EXPECT_EQ(outcome.exit_code, 2);
  std::vector<pid_t> grandchildren;
  const std::regex grandchild("\\[worker [01]\\] grandchild ([0-9]+)");
  for (const auto& line : out.Lines()) {
    std::smatch m;
    if (std::regex_match(line, m, grandchild)) grandchildren.push_back(std::stoi(m[1]));
  }
  ASSERT_EQ(grandchildren.size(), 2u) << out.Text();
  for (pid_t pgid : {leaving, waiting, failing}) {
    EXPECT_TRUE(GroupGone(pgid)) << "process group " << pgid << " still exists";
    EXPECT_TRUE(ProcessGone(pgid)) << "process " << pgid << " still exists";
  }
  for (pid_t pid : grandchildren) {
    EXPECT_TRUE(ProcessGone(pid)) << "grandchild " << pid << " still exists";
  }
}

TEST(ProcessSupervisorTest, LeftoverGroupMembersOfASuccessfulJobAreStopped) {
  MemoryFile out, err;
  JobOutcome outcome;
  pid_t leader = 0;
  {
    ProcessSupervisor supervisor(Options(out, err));
    leader = supervisor.Start(Shell("worker 0", "sleep 1000 & exit 0"));
    outcome = supervisor.Run();
  }
  EXPECT_EQ(outcome.exit_code, 0);
  EXPECT_TRUE(GroupGone(leader));
  EXPECT_NE(LineIndex(err.Lines(), "every process of the job has exited, but 1 process group"), -1)
      << err.Text();
}

TEST(ProcessSupervisorTest, KeepsGoingWhenItsOutputIsClosed) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ::close(fds[0]);  // nobody reads the launcher's stdout: writes fail with EPIPE
  MemoryFile err;
  SupervisorOptions options;
  options.stdout_fd = fds[1];
  options.stderr_fd = err.fd();
  JobOutcome outcome;
  {
    ProcessSupervisor supervisor(options);
    supervisor.Start(Shell("worker 0",
                           "i=0; while [ $i -lt 1000 ]; do echo line $i; i=$((i+1)); "
                           "done"));
    outcome = supervisor.Run();
  }
  ::close(fds[1]);
  EXPECT_EQ(outcome.exit_code, 0);
  ASSERT_EQ(outcome.exits.size(), 1u);
  EXPECT_TRUE(outcome.exits[0].status.success());
}

TEST(ProcessSupervisorTest, StartRejectsAProgramThatIsNotThere) {
  MemoryFile out, err;
  ProcessSupervisor supervisor(Options(out, err));
  try {
    supervisor.Start({"worker 0", {"tandem-no-such-program"}, BaseEnv()});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'tandem-no-such-program' not found"));
  }
  EXPECT_THROW(supervisor.Start({"worker 0", {}, BaseEnv()}), InvalidArgument);
}

TEST(ProcessSupervisorTest, StartReportsAFailedExec) {
  char path[] = "/tmp/tandem-not-executable-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);  // mode 0600: not executable
  MemoryFile out, err;
  {
    ProcessSupervisor supervisor(Options(out, err));
    try {
      supervisor.Start({"worker 4", {path}, BaseEnv()});
      ADD_FAILURE() << "expected IoError";
    } catch (const IoError& e) {
      EXPECT_THAT(e.what(), HasSubstr("cannot start worker 4"));
      EXPECT_THAT(e.what(), HasSubstr("execve"));
      EXPECT_THAT(e.what(), HasSubstr("Permission denied"));
    }
    EXPECT_EQ(supervisor.Run().exit_code, 0);  // nothing else was started
  }
  ::unlink(path);
}

TEST(ProcessSupervisorTest, DestructorKillsWhatRunNeverSupervised) {
  MemoryFile out, err;
  pid_t pid = 0;
  {
    ProcessSupervisor supervisor(Options(out, err));
    pid = supervisor.Start(Shell("worker 0", "sleep 1000 & wait"));
  }
  EXPECT_TRUE(GroupGone(pid));
}

TEST(ProcessSupervisorTest, RestoresTheSignalMask) {
  sigset_t before, after;
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, nullptr, &before), 0);
  {
    MemoryFile out, err;
    ProcessSupervisor supervisor(Options(out, err));
    sigset_t during;
    ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, nullptr, &during), 0);
    EXPECT_EQ(sigismember(&during, SIGINT), 1);
    EXPECT_EQ(sigismember(&during, SIGCHLD), 1);
  }
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, nullptr, &after), 0);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) {
    EXPECT_EQ(sigismember(&before, sig), sigismember(&after, sig)) << "signal " << sig;
  }
}

// Runs a supervisor in a forked copy of this test process, so that signals
// can be sent to "the launcher" without hitting the test runner. The copy
// writes the children's output and its reports to a pipe the test reads.
class ForkedSupervisor {
 public:
  ForkedSupervisor(std::vector<ProcessSpec> specs, SupervisorOptions options) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::close(fds[0]);
      int code = 120;
      try {
        options.stdout_fd = fds[1];
        options.stderr_fd = fds[1];
        ProcessSupervisor supervisor(options);
        for (const auto& spec : specs) supervisor.Start(spec);
        code = supervisor.Run().exit_code;
      } catch (...) {
        code = 121;
      }
      ::_exit(code);
    }
    ::close(fds[1]);
    read_fd_ = fds[0];
  }

  ~ForkedSupervisor() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (read_fd_ >= 0) ::close(read_fd_);
  }

  pid_t pid() const { return pid_; }

  // Reads output until `count` lines matched `pattern` (whose group 1 is
  // returned for each), or `timeout` passed.
  std::vector<std::string> WaitForLines(const std::regex& pattern, size_t count,
                                        milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    std::vector<std::string> found;
    while (found.size() < count) {
      size_t newline;
      while ((newline = buffer_.find('\n')) != std::string::npos && found.size() < count) {
        std::string line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        text_ += line + "\n";
        std::smatch m;
        if (std::regex_search(line, m, pattern)) found.push_back(m[1]);
      }
      if (found.size() >= count) break;
      auto left = std::chrono::duration_cast<milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{read_fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[4096];
      ssize_t n = ::read(read_fd_, chunk, sizeof(chunk));
      if (n <= 0) break;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
    return found;
  }

  // Waits up to `timeout` for the forked supervisor to exit; returns its
  // wait status, or -1 on timeout. Reads its remaining output meanwhile.
  int Wait(milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      char chunk[4096];
      pollfd p{read_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) > 0) {
        ssize_t n = ::read(read_fd_, chunk, sizeof(chunk));
        if (n > 0) buffer_.append(chunk, static_cast<size_t>(n));
      }
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return status;
      }
    }
    return -1;
  }

  // Everything read so far.
  std::string Output() const { return text_ + buffer_; }

 private:
  pid_t pid_ = -1;
  int read_fd_ = -1;
  bool reaped_ = false;
  std::string buffer_;
  std::string text_;
};

struct ForwardCase {
  int signal;
  int expected_exit;
  const char* name;
};

class SignalForwardingTest : public ::testing::TestWithParam<ForwardCase> {};

TEST_P(SignalForwardingTest, ForwardsTheSignalAndExitsWith128PlusIt) {
  const ForwardCase c = GetParam();
  SupervisorOptions options;
  options.kill_delay = milliseconds(5000);
  // Foreground sleeps: a non-interactive shell starts background jobs with
  // SIGINT ignored, which would leave them to the SIGKILL.
  ForkedSupervisor launcher({Shell("worker 0", "echo ready $$; sleep 1000; echo after"),
                             Shell("worker 1", "echo ready $$; sleep 1000; echo after"),
                             Shell("scheduler", "echo ready $$; exec sleep 1000")},
                            options);
  auto pgids = launcher.WaitForLines(std::regex("ready ([0-9]+)"), 3, milliseconds(20000));
  ASSERT_EQ(pgids.size(), 3u) << launcher.Output();
  ASSERT_EQ(::kill(launcher.pid(), c.signal), 0);
  int status = launcher.Wait(milliseconds(20000));
  ASSERT_NE(status, -1) << "the supervisor did not exit\n" << launcher.Output();
  ASSERT_TRUE(WIFEXITED(status)) << launcher.Output();
  EXPECT_EQ(WEXITSTATUS(status), c.expected_exit) << launcher.Output();
  EXPECT_THAT(launcher.Output(), HasSubstr(std::string("[launcher] received ") + c.name +
                                           "; forwarding it to 3 process groups"));
  EXPECT_THAT(launcher.Output(), HasSubstr(std::string("[launcher] job interrupted by ") + c.name));
  // The children died of the forwarded signal, not of a later SIGKILL.
  EXPECT_THAT(launcher.Output(), HasSubstr(std::string("killed by signal ") +
                                           std::to_string(c.signal) + " (" + c.name + ")"));
  for (const auto& pgid : pgids) {
    EXPECT_TRUE(GroupGone(std::stoi(pgid))) << "process group " << pgid << " still exists";
  }
}

INSTANTIATE_TEST_SUITE_P(Signals, SignalForwardingTest,
                         ::testing::Values(ForwardCase{SIGINT, 130, "SIGINT"},
                                           ForwardCase{SIGTERM, 143, "SIGTERM"},
                                           ForwardCase{SIGHUP, 129, "SIGHUP"}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// A child killed while the supervisor could not run, then a SIGTERM: the
// signalfd gives SIGTERM (15) before the older SIGCHLD (17), yet the kill
// came first, so it is the job's failure (as rank-exec must report it when
// mpirun stops it right after its rank was killed), not a consequence of
// the interruption. The supervisor is stopped (SIGSTOP) while both arrive.
TEST(LauncherSignalTest, AChildKilledBeforeAnInterruptionIsTheFailure) {
  SupervisorOptions options;
  options.kill_delay = milliseconds(5000);
  ForkedSupervisor launcher({Shell("worker 0", "echo ready $$; sleep 1000"),
                             Shell("worker 1", "echo ready $$; sleep 1000")},
                            options);
  auto pgids = launcher.WaitForLines(std::regex("ready ([0-9]+)"), 2, milliseconds(20000));
  ASSERT_EQ(pgids.size(), 2u) << launcher.Output();
  ASSERT_EQ(::kill(launcher.pid(), SIGSTOP), 0);
  const pid_t victim = static_cast<pid_t>(std::stoi(pgids[1]));
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  // Dead (a zombie that the stopped supervisor has not reaped), its
  // SIGCHLD pending; only then the SIGTERM.
  bool zombie = false;
  for (int i = 0; i < 400 && !zombie; ++i) {
    std::ifstream stat("/proc/" + pgids[1] + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t paren = text.rfind(')');
    zombie = paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
    if (!zombie) std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_TRUE(zombie) << "worker 1 did not die of SIGKILL";
  ASSERT_EQ(::kill(launcher.pid(), SIGTERM), 0);
  ASSERT_EQ(::kill(launcher.pid(), SIGCONT), 0);
  int status = launcher.Wait(milliseconds(20000));
  ASSERT_NE(status, -1) << "the supervisor did not exit\n" << launcher.Output();
  ASSERT_TRUE(WIFEXITED(status)) << launcher.Output();
  EXPECT_EQ(WEXITSTATUS(status), 137) << launcher.Output();
  // The "ready" lines come in either order: the final line names the
  // process that was killed, whichever worker it is.
  EXPECT_TRUE(std::regex_search(
      launcher.Output(), std::regex("\\[launcher\\] job failed: worker [01] \\(pid " + pgids[1] +
                                    "\\) killed by signal 9 \\(SIGKILL\\)\n")))
      << launcher.Output();
  EXPECT_THAT(launcher.Output(), Not(HasSubstr("job interrupted")));
  for (const auto& pgid : pgids) {
    EXPECT_TRUE(GroupGone(std::stoi(pgid))) << "process group " << pgid << " still exists";
  }
}

TEST(LauncherSignalTest, SecondInterruptKillsAtOnce) {
  SupervisorOptions options;
  // Far longer than the test waits: only the second SIGINT can end the job.
  options.kill_delay = milliseconds(120000);
  ForkedSupervisor launcher(
      {Shell("worker 0", "trap '' INT; echo ready $$; while :; do sleep 0.05; done")}, options);
  auto pgids = launcher.WaitForLines(std::regex("ready ([0-9]+)"), 1, milliseconds(20000));
  ASSERT_EQ(pgids.size(), 1u) << launcher.Output();
  ASSERT_EQ(::kill(launcher.pid(), SIGINT), 0);
  auto forwarded =
      launcher.WaitForLines(std::regex("(received SIGINT; forwarding)"), 1, milliseconds(20000));
  ASSERT_EQ(forwarded.size(), 1u) << launcher.Output();
  ASSERT_EQ(::kill(launcher.pid(), SIGINT), 0);
  int status = launcher.Wait(milliseconds(30000));
  ASSERT_NE(status, -1) << "the second SIGINT did not end the job\n" << launcher.Output();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  EXPECT_THAT(launcher.Output(), HasSubstr("received SIGINT again; sending SIGKILL"));
  EXPECT_THAT(launcher.Output(), HasSubstr("killed by signal 9 (SIGKILL)"));
  EXPECT_TRUE(GroupGone(std::stoi(pgids[0])));
}

TEST(LauncherSignalTest, ChildrenDieWhenTheLauncherIsKilled) {
  SupervisorOptions options;
  ForkedSupervisor launcher({Shell("worker 0", "echo ready $$; exec sleep 1000")}, options);
  auto pids = launcher.WaitForLines(std::regex("ready ([0-9]+)"), 1, milliseconds(20000));
  ASSERT_EQ(pids.size(), 1u) << launcher.Output();
  const pid_t child = std::stoi(pids[0]);
  ASSERT_EQ(::kill(launcher.pid(), SIGKILL), 0);
  ASSERT_NE(launcher.Wait(milliseconds(20000)), -1);
  // PR_SET_PDEATHSIG kills the child; init reaps it when it gets to it, so
  // "dead" means gone or a zombie.
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  bool dead = false;
  while (!dead && std::chrono::steady_clock::now() < end) {
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    auto paren = content.rfind(')');
    dead = content.empty() || (paren != std::string::npos && paren + 2 < content.size() &&
                               (content[paren + 2] == 'Z' || content[paren + 2] == 'X'));
    if (!dead) std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_TRUE(dead) << "pid " << child << " outlived its launcher";
}

// --- rank launchers (mpirun, srun): docs/launch.md "Through Open MPI" ---

// What a rank launcher relays: each rank's output, with rank-exec's own
// "[rank-exec] job failed: ..." line for the rank that failed.
struct RelayCase {
  const char* name;
  std::string script;  // the rank launcher's stand-in
  int exit_code;       // the job's
  std::string last;    // the launcher's last line
};

class RelayedRankFailureTest : public ::testing::TestWithParam<RelayCase> {};

TEST_P(RelayedRankFailureTest, TheFirstReportedRankIsTheJobsFailure) {
  const RelayCase& c = GetParam();
  MemoryFile out, err;
  JobOutcome outcome;
  {
    ProcessSupervisor supervisor(Options(out, err));
    ProcessSpec spec = Shell("mpirun", c.script);
    spec.prefix_output = false;
    spec.relays_rank_exec = true;
    supervisor.Start(spec);
    outcome = supervisor.Run();
  }
  EXPECT_EQ(outcome.exit_code, c.exit_code) << err.Text();
  auto lines = err.Lines();
  ASSERT_FALSE(lines.empty());
  EXPECT_THAT(lines.back(), ::testing::MatchesRegex(c.last)) << err.Text();
  // The exits (which the restart decision reads: AttemptCause) have the
  // relayed rank's status for a failed launcher, not the launcher's own.
  ASSERT_EQ(outcome.exits.size(), 1u) << err.Text();
  EXPECT_EQ(outcome.exits.front().status.ShellCode(), c.exit_code) << err.Text();
  const std::optional<ProcessExit> cause = AttemptCause(outcome);
  ASSERT_EQ(cause.has_value(), c.exit_code != 0) << err.Text();
  if (cause) {
    EXPECT_EQ(cause->status.ShellCode(), c.exit_code);
    EXPECT_EQ(lines.back(), "[launcher] job failed: " + cause->Describe());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Reports, RelayedRankFailureTest,
    ::testing::Values(
        RelayCase{"KilledRank",
                  "echo '[rank-exec] job failed: worker 1 on h2 (pid 4711) killed by signal 9 "
                  "(SIGKILL)' >&2; echo '[rank-exec] job failed: worker 0 on h1 (pid 12) exited "
                  "with status 1' >&2; exit 1",
                  137,
                  "\\[launcher\\] job failed: worker 1 on h2 \\(pid 4711\\) killed by signal 9 "
                  "\\(SIGKILL\\)"},
        RelayCase{"ExitedRankOnStdout",
                  "echo '[rank-exec] job failed: server 0 on n07 (pid 9) exited with status 3'; "
                  "exit 14",
                  3, "\\[launcher\\] job failed: server 0 on n07 \\(pid 9\\) exited with status 3"},
        // The report at the moment of the failure counts before later ones.
        RelayCase{"TearingDownLine",
                  "echo '[rank-exec] worker 2 on h3 (pid 77) killed by signal 15 (SIGTERM); "
                  "tearing down the job' >&2; echo '[rank-exec] job failed: worker 0 on h1 (pid "
                  "8) exited with status 1' >&2; exit 1",
                  143,
                  "\\[launcher\\] job failed: worker 2 on h3 \\(pid 77\\) killed by signal 15 "
                  "\\(SIGTERM\\)"},
        // Reports of ranks on other hosts arrive in any order: a death by a
        // signal wins, then the earliest time seen, whatever the order.
        RelayCase{"KilledBeforeExited",
                  "echo '[rank-exec] server 0 on h1 (pid 5) exited with status 1 (seen at "
                  "1763906457.430); tearing down the job' >&2; echo '[rank-exec] worker 3 on h3 "
                  "(pid 6) killed by signal 9 (SIGKILL) (seen at 1763906457.441); tearing down "
                  "the job' >&2; echo '[rank-exec] worker 0 on h2 (pid 7) exited with status 1 "
                  "(seen at 1763906457.425); tearing down the job' >&2; exit 1",
                  137,
                  "\\[launcher\\] job failed: worker 3 on h3 \\(pid 6\\) killed by signal 9 "
                  "\\(SIGKILL\\)"},
        RelayCase{"EarliestOfTheExits",
                  "echo '[rank-exec] server 0 on h1 (pid 5) exited with status 4 (seen at "
                  "1763906457.430); tearing down the job' >&2; echo '[rank-exec] worker 0 on h2 "
                  "(pid 7) exited with status 2 (seen at 1763906457.425); tearing down the job' "
                  ">&2; exit 1",
                  2, "\\[launcher\\] job failed: worker 0 on h2 \\(pid 7\\) exited with status 2"},
        // No rank reported (a rank-exec killed before it could): mpirun's own.
        RelayCase{"NoReport", "echo '[rank-exec] job interrupted by SIGTERM' >&2; exit 14", 14,
                  "\\[launcher\\] job failed: mpirun \\(pid [0-9]+\\) exited with status 14"},
        // A report of a rank that failed, but the launcher itself succeeded.
        RelayCase{"LauncherSucceeded",
                  "echo '[rank-exec] job failed: worker 1 on h2 (pid 5) exited with status 2' "
                  ">&2; exit 0",
                  0, "\\[launcher\\] mpirun \\(pid [0-9]+\\) exited with status 0"}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

// srun (ProcessSpec::stop_with_two_sigints): whatever stops the job reaches
// it as two SIGINTs, less than a second apart, never as SIGTERM.
class TwoSigintsTest : public ::testing::TestWithParam<int> {};

TEST_P(TwoSigintsTest, StopsWithTwoSigintsWithinASecond) {
  const int signal = GetParam();
  SupervisorOptions options;
  options.kill_delay = milliseconds(20000);
  // Prints the time of each SIGINT (ms) and ends on the second.
  ProcessSpec srun = Shell("srun",
                           "n=0; trap 'n=$((n+1)); echo int $n $(date +%s%3N); "
                           "[ $n = 2 ] && exit 5' INT; trap 'echo got TERM; exit 6' TERM; "
                           "echo ready $$; while :; do sleep 0.02; done");
  srun.stop_with_two_sigints = true;
  ForkedSupervisor launcher({srun}, options);
  ASSERT_EQ(launcher.WaitForLines(std::regex("ready ([0-9]+)"), 1, milliseconds(20000)).size(), 1u)
      << launcher.Output();
  ASSERT_EQ(::kill(launcher.pid(), signal), 0);
  auto times = launcher.WaitForLines(std::regex("int [12] ([0-9]+)"), 2, milliseconds(20000));
  int status = launcher.Wait(milliseconds(20000));
  ASSERT_NE(status, -1) << launcher.Output();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + signal) << launcher.Output();
  ASSERT_EQ(times.size(), 2u) << launcher.Output();
  const long long gap = std::stoll(times[1]) - std::stoll(times[0]);
  EXPECT_GT(gap, 100) << launcher.Output();  // two signals, not one merged
  EXPECT_LT(gap, 1000) << launcher.Output();
  EXPECT_THAT(launcher.Output(), ::testing::Not(HasSubstr("got TERM")));
  EXPECT_THAT(launcher.Output(), HasSubstr("srun (pid"));
}

INSTANTIATE_TEST_SUITE_P(LauncherSignals, TwoSigintsTest, ::testing::Values(SIGINT, SIGTERM));

// A process of the job whose parent died outside every group the supervisor
// watches (a rank whose rank-exec mpirun killed) is adopted, then ended and
// reaped before Run returns.
TEST(ProcessSupervisorTest, EndsAndReapsAdoptedOrphans) {
  MemoryFile out, err;
  const std::string marker =
      std::filesystem::temp_directory_path() / ("orphan-" + std::to_string(::getpid()));
  JobOutcome outcome;
  {
    SupervisorOptions options = Options(out, err);
    options.end_adopted_orphans = true;
    ProcessSupervisor supervisor(options);
    // setsid: the sleeper leaves the group, so only adoption reaches it.
    // The marker is written once the sleeper has its own session.
    supervisor.Start(Shell("mpirun", "setsid sh -c 'echo $$ > " + marker +
                                         "; exec sleep 1000' & while [ ! -s " + marker +
                                         " ]; do sleep 0.01; done; exit 0"));
    outcome = supervisor.Run();
  }
  std::ifstream in(marker);
  pid_t orphan = 0;
  in >> orphan;
  std::filesystem::remove(marker);
  ASSERT_GT(orphan, 0);
  EXPECT_TRUE(ProcessGone(orphan)) << "pid " << orphan << " (not even a zombie should be left)";
  EXPECT_THAT(err.Text(), HasSubstr("reaped pid " + std::to_string(orphan) +
                                    ", a process of the job whose parent had died"));
  EXPECT_EQ(outcome.exit_code, 0);
}

// Elastic worker counts (SupervisorOptions::min_workers, --workers MIN:MAX):
// a worker that fails while enough others remain leaves the job, which goes
// on; a loss below the minimum, or any service's failure, tears it down as
// before. The processes of a case start in order; "{LABEL}" in a script or
// an expected line stands for the pid of the process so labelled (in a
// script, one started before it).
struct ElasticProcess {
  std::string label;
  std::string script;
  bool service = false;
};

struct ElasticCase {
  const char* name;
  int min_workers;
  std::vector<ElasticProcess> processes;
  int exit_code;
  std::vector<std::string> left;       // the workers that left, in order
  std::string first_failure;           // its label; "" for none
  std::vector<std::string> torn_down;  // ended by the tear-down's SIGTERM
  std::vector<std::string> lines;      // launcher lines that must be there, whole
  std::string last_line;               // "" when the launcher says nothing at the end
};

// Waits until the process labelled `label` was reaped (kill -0 succeeds on a
// zombie), so that the supervisor has decided about its end.
std::string AfterReaped(const std::string& label) {
  return "while kill -0 {" + label + "} 2>/dev/null; do sleep 0.02; done; ";
}

// `text` with every "{LABEL}" replaced by that process's pid.
std::string FillPids(std::string text, const std::map<std::string, pid_t>& pids) {
  for (const auto& [label, pid] : pids) {
    const std::string key = "{" + label + "}";
    for (size_t at; (at = text.find(key)) != std::string::npos;) {
      text.replace(at, key.size(), std::to_string(pid));
    }
  }
  return text;
}

void PrintTo(const ElasticCase& c, std::ostream* os) { *os << c.name; }

class ElasticWorkersTest : public ::testing::TestWithParam<ElasticCase> {};

TEST_P(ElasticWorkersTest, AWorkerLeavesWhileTheMinimumRemains) {
  const ElasticCase& c = GetParam();
  MemoryFile out, err;
  SupervisorOptions options = Options(out, err);
  options.teardown_grace = milliseconds(300);
  options.kill_delay = milliseconds(2000);
  options.min_workers = c.min_workers;
  std::map<std::string, pid_t> pids;
  JobOutcome outcome;
  const auto start = std::chrono::steady_clock::now();
  {
    ProcessSupervisor supervisor(options);
    for (const ElasticProcess& p : c.processes) {
      ProcessSpec spec = Shell(p.label, FillPids(p.script, pids));
      spec.service = p.service;
      pids[p.label] = supervisor.Start(spec);
    }
    outcome = supervisor.Run();
  }
  // Nothing waited for its 30 s sleep: the survivors of a failed job were torn down.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15)) << err.Text();
  EXPECT_EQ(outcome.exit_code, c.exit_code) << err.Text();

  std::vector<std::string> left;
  for (const ProcessExit& e : outcome.exits) {
    if (e.left) left.push_back(e.label);
  }
  EXPECT_EQ(left, c.left) << err.Text();
  EXPECT_EQ(outcome.first_failure ? outcome.first_failure->label : "", c.first_failure)
      << err.Text();
  // A worker that left is never the cause a restart is decided on.
  const std::optional<ProcessExit> cause = AttemptCause(outcome);
  EXPECT_EQ(cause ? cause->label : "", c.first_failure) << err.Text();
  RestartOptions restarts;
  restarts.max_restarts = 3;
  EXPECT_EQ(DecideRestart(restarts, outcome, 0).verdict == RestartVerdict::kFinished,
            c.exit_code == 0)
      << err.Text();

  for (const std::string& label : c.torn_down) {
    const ProcessExit* e = FindExit(outcome, label);
    ASSERT_NE(e, nullptr) << label;
    EXPECT_TRUE(e->torn_down) << label;
    EXPECT_TRUE(e->status.signaled && e->status.signal == SIGTERM) << label << " " << err.Text();
  }
  const std::vector<std::string> lines = err.Lines();
  for (const std::string& line : c.lines) {
    EXPECT_THAT(lines, ::testing::Contains("[launcher] " + FillPids(line, pids))) << err.Text();
  }
  ASSERT_FALSE(lines.empty());
  if (c.last_line.empty()) {
    EXPECT_THAT(lines.back(), ::testing::Not(HasSubstr("job "))) << err.Text();
  } else {
    EXPECT_EQ(lines.back(), "[launcher] " + FillPids(c.last_line, pids)) << err.Text();
  }
}

std::vector<ElasticProcess> Workers(std::vector<std::pair<std::string, std::string>> scripts) {
  std::vector<ElasticProcess> processes;
  for (auto& [label, script] : scripts) processes.push_back({label, script});
  return processes;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ElasticWorkersTest,
    ::testing::Values(
        ElasticCase{"OneWorkerLeaves",
                    3,
                    Workers({{"worker 3", "exit 9"},
                             {"worker 0", AfterReaped("worker 3") + "exit 0"},
                             {"worker 1", AfterReaped("worker 3") + "exit 0"},
                             {"worker 2", AfterReaped("worker 3") + "exit 0"}}),
                    0,
                    {"worker 3"},
                    "",
                    {},
                    {"worker 3 (pid {worker 3}) exited with status 9; the job goes on with 3 of 4 "
                     "workers (--workers 3:4)"},
                    "job succeeded with 3 of 4 workers (--workers 3:4); left the job: worker 3 "
                    "(pid {worker 3}) exited with status 9"},
        ElasticCase{"AKilledWorkerLeaves",
                    3,
                    Workers({{"worker 1", "kill -9 $$"},
                             {"worker 0", AfterReaped("worker 1") + "exit 0"},
                             {"worker 2", AfterReaped("worker 1") + "exit 0"},
                             {"worker 3", AfterReaped("worker 1") + "exit 0"}}),
                    0,
                    {"worker 1"},
                    "",
                    {},
                    {"worker 1 (pid {worker 1}) killed by signal 9 (SIGKILL); the job goes on "
                     "with 3 of 4 workers (--workers 3:4)"},
                    "job succeeded with 3 of 4 workers (--workers 3:4); left the job: worker 1 "
                    "(pid {worker 1}) killed by signal 9 (SIGKILL)"},
        ElasticCase{"TwoLeaveAboveTheMinimum",
                    2,
                    Workers({{"worker 3", "exit 9"},
                             {"worker 2", AfterReaped("worker 3") + "exit 7"},
                             {"worker 0", AfterReaped("worker 2") + "exit 0"},
                             {"worker 1", AfterReaped("worker 2") + "exit 0"}}),
                    0,
                    {"worker 3", "worker 2"},
                    "",
                    {},
                    {"worker 3 (pid {worker 3}) exited with status 9; the job goes on with 3 of 4 "
                     "workers (--workers 2:4)",
                     "worker 2 (pid {worker 2}) exited with status 7; the job goes on with 2 of 4 "
                     "workers (--workers 2:4)"},
                    "job succeeded with 2 of 4 workers (--workers 2:4); left the job: worker 3 "
                    "(pid {worker 3}) exited with status 9, worker 2 (pid {worker 2}) exited "
                    "with status 7"},
        ElasticCase{"TheSecondLossIsBelowTheMinimum",
                    3,
                    Workers({{"worker 3", "exit 9"},
                             {"worker 2", AfterReaped("worker 3") + "exit 7"},
                             {"worker 0", "exec sleep 30"},
                             {"worker 1", "exec sleep 30"}}),
                    7,
                    {"worker 3"},
                    "worker 2",
                    {"worker 0", "worker 1"},
                    {"worker 3 (pid {worker 3}) exited with status 9; the job goes on with 3 of 4 "
                     "workers (--workers 3:4)",
                     "worker 2 (pid {worker 2}) exited with status 7, which leaves 2 of 4 "
                     "workers, below the minimum of 3 (--workers 3:4); tearing down the job"},
                    "job failed: worker 2 (pid {worker 2}) exited with status 7; 2 of 4 workers "
                    "remained, below the minimum of 3 (--workers 3:4); had left the job: worker 3 "
                    "(pid {worker 3}) exited with status 9"},
        // The scheduler counts a worker that finished as a member until the
        // job ends; so does the launcher.
        ElasticCase{"AWorkerThatFinishedStillCounts",
                    3,
                    Workers({{"worker 0", "exit 0"},
                             {"worker 3", AfterReaped("worker 0") + "exit 9"},
                             {"worker 1", AfterReaped("worker 3") + "exit 0"},
                             {"worker 2", AfterReaped("worker 3") + "exit 0"}}),
                    0,
                    {"worker 3"},
                    "",
                    {},
                    {"worker 3 (pid {worker 3}) exited with status 9; the job goes on with 3 of 4 "
                     "workers (--workers 3:4)"},
                    "job succeeded with 3 of 4 workers (--workers 3:4); left the job: worker 3 "
                    "(pid {worker 3}) exited with status 9"},
        ElasticCase{
            "TheServicesEndAfterTheRemainingWorkers",
            2,
            {{"worker 2", "exit 9"},
             {"worker 0", AfterReaped("worker 2") + "exit 0"},
             {"worker 1", AfterReaped("worker 2") + "exit 0"},
             {"server 0", AfterReaped("worker 0") + AfterReaped("worker 1") + "exit 0", true}},
            0,
            {"worker 2"},
            "",
            {},
            {"worker 2 (pid {worker 2}) exited with status 9; the job goes on with 2 of 3 "
             "workers (--workers 2:3)"},
            "job succeeded with 2 of 3 workers (--workers 2:3); left the job: worker 2 "
            "(pid {worker 2}) exited with status 9"},
        ElasticCase{"AServersFailureTearsTheJobDown",
                    1,
                    {{"server 0", "exit 5", true},
                     {"worker 0", "exec sleep 30"},
                     {"worker 1", "exec sleep 30"}},
                    5,
                    {},
                    "server 0",
                    {"worker 0", "worker 1"},
                    {"server 0 (pid {server 0}) exited with status 5; tearing down the job"},
                    "job failed: server 0 (pid {server 0}) exited with status 5"},
        // After the job failed, a worker's own failure is one more failure,
        // not a departure.
        ElasticCase{"AWorkerFailingDuringTheTearDownDoesNotLeave",
                    1,
                    {{"server 0", "exit 5", true},
                     {"worker 0", AfterReaped("server 0") + "exit 9"},
                     {"worker 1", "exec sleep 30"}},
                    5,
                    {},
                    "server 0",
                    {"worker 1"},
                    {"worker 0 (pid {worker 0}) exited with status 9"},
                    "job failed: server 0 (pid {server 0}) exited with status 5; then worker 0 "
                    "(pid {worker 0}) exited with status 9"},
        ElasticCase{"AsManyAsTheWorkersIsNotElastic",
                    3,
                    Workers({{"worker 2", "exit 9"},
                             {"worker 0", "exec sleep 30"},
                             {"worker 1", "exec sleep 30"}}),
                    9,
                    {},
                    "worker 2",
                    {"worker 0", "worker 1"},
                    {"worker 2 (pid {worker 2}) exited with status 9; tearing down the job"},
                    "job failed: worker 2 (pid {worker 2}) exited with status 9"},
        ElasticCase{"NoMinimumIsNotElastic",
                    0,
                    Workers({{"worker 2", "exit 9"},
                             {"worker 0", "exec sleep 30"},
                             {"worker 1", "exec sleep 30"}}),
                    9,
                    {},
                    "worker 2",
                    {"worker 0", "worker 1"},
                    {"worker 2 (pid {worker 2}) exited with status 9; tearing down the job"},
                    "job failed: worker 2 (pid {worker 2}) exited with status 9"},
        ElasticCase{
            "EveryWorkerSucceeds",
            2,
            Workers({{"worker 0", "exit 0"}, {"worker 1", "exit 0"}, {"worker 2", "exit 0"}}),
            0,
            {},
            "",
            {},
            {},
            ""}),
    [](const auto& info) { return std::string(info.param.name); });

// A server's PeerLost (200) reaped before the worker whose loss it reports
// fails the job first; the final line still names the worker as the cause
// and says the minimum its loss went below.
TEST(ElasticWorkersTest, TheFinalLineSaysTheMinimumWhenALostPeerIsReapedFirst) {
  MemoryFile out, err;
  SupervisorOptions options = Options(out, err);
  options.teardown_grace = milliseconds(300);
  options.min_workers = 3;
  std::map<std::string, pid_t> pids;
  JobOutcome outcome;
  {
    ProcessSupervisor supervisor(options);
    pids["worker 3"] = supervisor.Start(Shell("worker 3", "exit 9"));
    pids["server 0"] = supervisor.Start([&] {
      ProcessSpec server = Shell("server 0", FillPids(AfterReaped("worker 3") + "exit 200", pids));
      server.service = true;
      return server;
    }());
    pids["worker 2"] =
        supervisor.Start(Shell("worker 2", FillPids(AfterReaped("server 0") + "kill -9 $$", pids)));
    supervisor.Start(Shell("worker 0", "exec sleep 30"));
    supervisor.Start(Shell("worker 1", "exec sleep 30"));
    outcome = supervisor.Run();
  }
  EXPECT_EQ(outcome.exit_code, 128 + SIGKILL) << err.Text();
  ASSERT_TRUE(outcome.first_failure.has_value());
  EXPECT_EQ(outcome.first_failure->label, "server 0");
  EXPECT_EQ(AttemptCause(outcome)->label, "worker 2");
  const std::vector<std::string> lines = err.Lines();
  EXPECT_THAT(lines, ::testing::Contains(FillPids(
                         "[launcher] server 0 (pid {server 0}) exited with status 200; tearing "
                         "down the job",
                         pids)));
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back(),
            FillPids("[launcher] job failed: worker 2 (pid {worker 2}) killed by signal 9 "
                     "(SIGKILL); then server 0 (pid {server 0}) exited with status 200; 2 of 4 "
                     "workers remained, below the minimum of 3 (--workers 3:4); had left the job: "
                     "worker 3 (pid {worker 3}) exited with status 9",
                     pids));
}

// What a worker that left had started in its process group gets SIGTERM at
// once and SIGKILL kill_delay later, while the job goes on; here a
// grandchild that ignores SIGTERM is gone before the other workers end.
TEST(ElasticWorkersTest, WhatALeavingWorkerLeftInItsGroupIsEnded) {
  MemoryFile out, err;
  SupervisorOptions options = Options(out, err);
  options.kill_delay = milliseconds(300);
  options.min_workers = 1;
  char dir_template[] = "/tmp/tandem-elastic-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string pid_file = std::string(dir_template) + "/grandchild";
  JobOutcome outcome;
  {
    ProcessSupervisor supervisor(options);
    supervisor.Start(Shell("worker 1",
                           "sh -c \"trap '' TERM; while :; do sleep 0.05; done\" & "
                           "echo $! > " +
                               pid_file + "; exit 9"));
    supervisor.Start(Shell("worker 0", "sleep 2; if kill -0 $(cat " + pid_file +
                                           ") 2>/dev/null; then echo alive; else echo gone; fi"));
    outcome = supervisor.Run();
  }
  std::filesystem::remove_all(dir_template);
  EXPECT_EQ(outcome.exit_code, 0) << err.Text();
  EXPECT_THAT(out.Lines(), ::testing::Contains("[worker 0] gone")) << out.Text() << err.Text();
  EXPECT_THAT(err.Text(), HasSubstr("[launcher] sending SIGTERM to what worker 1 left in its "
                                    "process group (SIGKILL follows in 0.3 s)"));
  // Not the end-of-job sweep: the group was gone by then.
  EXPECT_THAT(err.Text(), ::testing::Not(HasSubstr("every process of the job has exited, but")));
}

// Replacing workers that left (SupervisorOptions::replace_departed_workers,
// --max-restarts in an elastic job without servers): the departed worker's
// spec is started again after replacement_delay, with TANDEM_RESTART_COUNT
// raised, while the budget, the policy and the job's state allow. "worker 2"
// runs its script with its own TANDEM_RESTART_COUNT; the others wait for the
// file `done` that a replacement's script may write (or for worker 2's end),
// so that none finishes before the replacement is decided.
struct ReplacementCase {
  const char* name;
  int max_replacements;
  bool any_failure;                // replace_after_any_failure (--restart-policy on-failure)
  std::string worker2;             // worker 2's script; $DONE is the file the others wait for
  std::string others;              // the other workers' script
  int replacements;                // JobOutcome::replacements
  int worker2_runs;                // processes labelled "worker 2" that ran
  std::vector<std::string> lines;  // launcher lines (regular expressions, whole)
  std::string last_line;           // a regular expression for the launcher's last line
};

void PrintTo(const ReplacementCase& c, std::ostream* os) { *os << c.name; }

// An elastic job (MIN 1) whose departed workers are replaced, with a short
// tear-down.
SupervisorOptions ReplacingOptions(const MemoryFile& out, const MemoryFile& err,
                                   int max_replacements, milliseconds delay) {
  SupervisorOptions options = Options(out, err);
  options.teardown_grace = milliseconds(300);
  options.kill_delay = milliseconds(2000);
  options.min_workers = 1;
  options.replace_departed_workers = true;
  options.max_replacements = max_replacements;
  options.replacement_delay = delay;
  return options;
}

class WorkerReplacementTest : public ::testing::TestWithParam<ReplacementCase> {};

TEST_P(WorkerReplacementTest, ADepartedWorkerIsReplacedWhenAllowed) {
  const ReplacementCase& c = GetParam();
  MemoryFile out, err;
  SupervisorOptions options = ReplacingOptions(out, err, c.max_replacements, milliseconds(50));
  options.replace_after_any_failure = c.any_failure;
  char dir_template[] = "/tmp/tandem-replace-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  std::map<std::string, std::string> env = BaseEnv();
  env["DONE"] = std::string(dir_template) + "/done";
  env["TANDEM_RESTART_COUNT"] = "0";
  JobOutcome outcome;
  const auto start = std::chrono::steady_clock::now();
  {
    ProcessSupervisor supervisor(options);
    supervisor.Start(Shell("worker 2", "echo run $TANDEM_RESTART_COUNT; " + c.worker2, env));
    supervisor.Start(Shell("worker 0", c.others, env));
    supervisor.Start(Shell("worker 1", c.others, env));
    outcome = supervisor.Run();
  }
  std::filesystem::remove_all(dir_template);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15)) << err.Text();
  EXPECT_EQ(outcome.exit_code, 0) << err.Text();
  EXPECT_EQ(outcome.replacements, c.replacements) << err.Text();
  // Each run of worker 2 saw the restarts made before it.
  std::vector<std::string> runs;
  for (const std::string& line : out.Lines()) {
    if (line.rfind("[worker 2] run ", 0) == 0) runs.push_back(line.substr(15));
  }
  std::vector<std::string> expected_runs;
  for (int k = 0; k < c.worker2_runs; ++k) expected_runs.push_back(std::to_string(k));
  EXPECT_EQ(runs, expected_runs) << out.Text() << err.Text();
  const std::vector<std::string> lines = err.Lines();
  for (const std::string& pattern : c.lines) {
    const std::regex re("\\[launcher\\] " + pattern);
    EXPECT_TRUE(std::any_of(lines.begin(), lines.end(),
                            [&](const std::string& l) { return std::regex_match(l, re); }))
        << pattern << "\n"
        << err.Text();
  }
  ASSERT_FALSE(lines.empty());
  EXPECT_TRUE(std::regex_match(lines.back(), std::regex("\\[launcher\\] " + c.last_line)))
      << c.last_line << "\n"
      << err.Text();
}

const std::string kWaitForDone =
    "for i in $(seq 500); do [ -e \"$DONE\" ] && exit 0; sleep 0.02; done; exit 3";
const std::string kPid = "\\(pid [0-9]+\\)";

INSTANTIATE_TEST_SUITE_P(
    Cases, WorkerReplacementTest,
    ::testing::Values(
        ReplacementCase{
            "AKilledWorkerIsReplaced",
            2,
            false,
            "if [ $TANDEM_RESTART_COUNT = 0 ]; then kill -9 $$; fi; touch \"$DONE\"",
            kWaitForDone,
            1,
            2,
            {"worker 2 " + kPid +
                 " killed by signal 9 \\(SIGKILL\\); the job goes on with 2 of 3 "
                 "workers \\(--workers 1:3\\)",
             "starting a replacement for worker 2 in 0.05 s \\(replacement 1 of 2\\); it joins the "
             "running job at the workers' next commit",
             "started the replacement for worker 2 \\(pid [0-9]+, replacement 1 of 2\\)"},
            "job succeeded with 3 of 3 workers \\(--workers 1:3\\) after 1 replacement; left the "
            "job: worker 2 " +
                kPid + " killed by signal 9 \\(SIGKILL\\)"},
        ReplacementCase{
            "AReplacementThatFailsIsReplacedWhileTheBudgetLasts",
            2,
            false,
            "if [ $TANDEM_RESTART_COUNT -lt 2 ]; then kill -9 $$; fi; touch \"$DONE\"",
            kWaitForDone,
            2,
            3,
            {"started the replacement for worker 2 \\(pid [0-9]+, replacement 1 of 2\\)",
             "started the replacement for worker 2 \\(pid [0-9]+, replacement 2 of 2\\)"},
            "job succeeded with 3 of 3 workers \\(--workers 1:3\\) after 2 replacements; left "
            "the job: worker 2 " +
                kPid + " killed by signal 9 \\(SIGKILL\\), worker 2 " + kPid +
                " killed by signal 9 \\(SIGKILL\\)"},
        ReplacementCase{
            "TheBudgetRunsOut",
            1,
            false,
            "if [ $TANDEM_RESTART_COUNT = 1 ]; then touch \"$DONE\"; fi; kill -9 $$",
            kWaitForDone,
            1,
            2,
            {"not replacing worker 2: no replacement left \\(1 of 1 used\\)"},
            "job succeeded with 2 of 3 workers \\(--workers 1:3\\) after 1 replacement; left the "
            "job: worker 2 " +
                kPid + " killed by signal 9 \\(SIGKILL\\), worker 2 " + kPid +
                " killed by signal 9 \\(SIGKILL\\)"},
        ReplacementCase{
            "ExitOneIsNotReplacedUnderExitCode",
            2,
            false,
            "touch \"$DONE\"; exit 1",
            kWaitForDone,
            0,
            1,
            {"not replacing worker 2: exit codes 1..127 are not retried under --restart-policy "
             "exit-code \\(on-failure retries them\\)"},
            "job succeeded with 2 of 3 workers \\(--workers 1:3\\); left the job: worker 2 " +
                kPid + " exited with status 1"},
        ReplacementCase{
            "ExitOneIsReplacedUnderOnFailure",
            2,
            true,
            "if [ $TANDEM_RESTART_COUNT = 0 ]; then exit 1; fi; touch \"$DONE\"",
            kWaitForDone,
            1,
            2,
            {"started the replacement for worker 2 \\(pid [0-9]+, replacement 1 of 2\\)"},
            "job succeeded with 3 of 3 workers \\(--workers 1:3\\) after 1 replacement; left the "
            "job: worker 2 " +
                kPid + " exited with status 1"},
        ReplacementCase{
            "ASetUpErrorIsNeverReplaced",
            2,
            true,
            "touch \"$DONE\"; exit 78",
            kWaitForDone,
            0,
            1,
            {"not replacing worker 2: its exit status 78 names a problem of the job's set-up, "
             "which a new process would meet again"},
            "job succeeded with 2 of 3 workers \\(--workers 1:3\\); left the job: worker 2 " +
                kPid + " exited with status 78"},
        // A worker that finished means the job is ending: no replacement is
        // decided then, and one decided before does not start.
        ReplacementCase{
            "NoReplacementOnceAWorkerFinished",
            2,
            false,
            "while [ ! -e \"$DONE\" ]; do sleep 0.02; done; sleep 0.3; kill -9 $$",
            "touch \"$DONE\"",
            0,
            1,
            {"not replacing worker 2: worker 0 has finished, so the job is ending"},
            "job succeeded with 2 of 3 workers \\(--workers 1:3\\); left the job: worker 2 " +
                kPid + " killed by signal 9 \\(SIGKILL\\)"}),
    [](const auto& info) { return std::string(info.param.name); });

// Two of three workers (MIN 2) are killed: the second loss is below the
// minimum. With elastic_timeout (--elastic-timeout) the job waits for the
// replacements, which start and let it succeed; with 0 it fails at once,
// as without replacements.
TEST(WorkerReplacementTest, BelowTheMinimumTheJobWaitsForTheReplacementsWhenAllowed) {
  for (const milliseconds timeout : {milliseconds(60000), milliseconds(0)}) {
    SCOPED_TRACE("elastic_timeout " + std::to_string(timeout.count()) + " ms");
    MemoryFile out, err;
    SupervisorOptions options = ReplacingOptions(out, err, 2, milliseconds(50));
    options.min_workers = 2;
    options.elastic_timeout = timeout;
    char dir_template[] = "/tmp/tandem-replace-XXXXXX";
    ASSERT_NE(::mkdtemp(dir_template), nullptr);
    std::map<std::string, std::string> env = BaseEnv();
    env["DONE"] = std::string(dir_template) + "/done";
    env["TANDEM_RESTART_COUNT"] = "0";
    // The replacements finish the job only once both workers were killed,
    // so that the second loss meets a job that is still running.
    const std::string leaver =
        "if [ $TANDEM_RESTART_COUNT = 0 ]; then touch \"$DONE.left.$$\"; kill -9 $$; fi; "
        "for i in $(seq 500); do [ $(ls \"$DONE\".left.* | wc -l) = 2 ] && break; sleep 0.02; "
        "done; touch \"$DONE\"";
    JobOutcome outcome;
    {
      ProcessSupervisor supervisor(options);
      supervisor.Start(Shell("worker 0", kWaitForDone, env));
      supervisor.Start(Shell("worker 1", leaver, env));
      supervisor.Start(Shell("worker 2", leaver, env));
      outcome = supervisor.Run();
    }
    std::filesystem::remove_all(dir_template);
    const std::vector<std::string> lines = err.Lines();
    const std::regex below("\\[launcher\\] worker [12] " + kPid +
                           " killed by signal 9 \\(SIGKILL\\), which leaves 1 of 3 workers, "
                           "below the minimum of 2 \\(--workers 2:3\\)(.*)");
    std::smatch tail;
    const auto line = std::find_if(lines.begin(), lines.end(), [&](const std::string& l) {
      return std::regex_match(l, tail, below);
    });
    ASSERT_NE(line, lines.end()) << err.Text();
    std::regex_match(*line, tail, below);
    if (timeout.count() > 0) {
      EXPECT_EQ(tail[1].str(),
                ": the job waits up to 60 s for its replacement to join (--elastic-timeout)");
      EXPECT_EQ(outcome.exit_code, 0) << err.Text();
      EXPECT_EQ(outcome.replacements, 2) << err.Text();
      EXPECT_TRUE(std::regex_match(lines.back(),
                                   std::regex("\\[launcher\\] job succeeded with 3 of 3 workers "
                                              "\\(--workers 2:3\\) after 2 replacements; .*")))
          << err.Text();
    } else {
      EXPECT_EQ(tail[1].str(), "; tearing down the job");
      EXPECT_NE(outcome.exit_code, 0) << err.Text();
    }
  }
}

TEST(WorkerReplacementTest, AReplacementDueAfterAWorkerFinishedDoesNotStart) {
  MemoryFile out, err;
  SupervisorOptions options = ReplacingOptions(out, err, 3, milliseconds(3000));
  JobOutcome outcome;
  std::map<std::string, pid_t> pids;
  const auto start = std::chrono::steady_clock::now();
  {
    ProcessSupervisor supervisor(options);
    pids["worker 1"] = supervisor.Start(Shell("worker 1", "kill -9 $$"));
    supervisor.Start(Shell("worker 0", FillPids(AfterReaped("worker 1") + "exit 0", pids)));
    outcome = supervisor.Run();
  }
  // Decided at once, dropped at worker 0's end rather than at its time.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2500))
      << err.Text();
  EXPECT_EQ(outcome.exit_code, 0) << err.Text();
  EXPECT_EQ(outcome.replacements, 0);
  EXPECT_THAT(err.Text(), HasSubstr("[launcher] starting a replacement for worker 1 in 3 s "
                                    "(replacement 1 of 3)"));
  EXPECT_THAT(err.Text(), HasSubstr("[launcher] not starting the replacement for worker 1: "
                                    "worker 0 has finished, so the job is ending"));
}

// A replacement that never joined (the job finished first; here one that
// just sleeps) is stopped teardown_grace after every other worker ended,
// and leaves: the job succeeds.
TEST(WorkerReplacementTest, AReplacementStillRunningAfterTheOthersEndedIsStopped) {
  MemoryFile out, err;
  SupervisorOptions options = ReplacingOptions(out, err, 2, milliseconds(0));
  char dir_template[] = "/tmp/tandem-replace-stop-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  std::map<std::string, std::string> env = BaseEnv();
  env["STARTED"] = std::string(dir_template) + "/started";
  env["TANDEM_RESTART_COUNT"] = "0";
  JobOutcome outcome;
  const auto start = std::chrono::steady_clock::now();
  {
    ProcessSupervisor supervisor(options);
    supervisor.Start(Shell("worker 1",
                           "if [ $TANDEM_RESTART_COUNT = 0 ]; then kill -9 $$; fi; touch "
                           "\"$STARTED\"; exec sleep 30",
                           env));
    supervisor.Start(
        Shell("worker 0", "while [ ! -e \"$STARTED\" ]; do sleep 0.02; done; exit 0", env));
    outcome = supervisor.Run();
  }
  std::filesystem::remove_all(dir_template);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << err.Text();
  EXPECT_EQ(outcome.exit_code, 0) << err.Text();
  EXPECT_EQ(outcome.replacements, 1) << err.Text();
  const std::regex stopped(
      "\\[launcher\\] worker 1 \\(pid [0-9]+\\), a replacement, is still running 0.3 s after "
      "every other worker ended: it did not join before the job ended; sending SIGTERM "
      "\\(SIGKILL follows in 2 s\\)");
  const std::vector<std::string> lines = err.Lines();
  EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [&](const std::string& l) {
    return std::regex_match(l, stopped);
  })) << err.Text();
  EXPECT_THAT(err.Text(), HasSubstr("not replacing worker 1: worker 0 has finished"));
  ASSERT_FALSE(lines.empty());
  EXPECT_TRUE(std::regex_match(
      lines.back(),
      std::regex("\\[launcher\\] job succeeded with 1 of 2 workers \\(--workers 1:2\\) after 1 "
                 "replacement; left the job: worker 1 \\(pid [0-9]+\\) killed by signal 9 "
                 "\\(SIGKILL\\), worker 1 \\(pid [0-9]+\\) killed by signal 15 \\(SIGTERM\\)")))
      << err.Text();
}

// A replacement writes to its place's log file after the departed worker's
// lines, and a worker that was not asked to be replaced is not.
TEST(WorkerReplacementTest, TheReplacementAppendsToItsPlacesLogFile) {
  MemoryFile out, err;
  char dir_template[] = "/tmp/tandem-replace-log-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  SupervisorOptions options = ReplacingOptions(out, err, 1, milliseconds(0));
  options.log_dir = dir_template;
  std::map<std::string, std::string> env = BaseEnv();
  env["TANDEM_RESTART_COUNT"] = "4";  // a later attempt of a restarted job
  env["DONE"] = std::string(dir_template) + "/done";
  JobOutcome outcome;
  {
    ProcessSupervisor supervisor(options);
    supervisor.Start(Shell("worker 1",
                           "echo count $TANDEM_RESTART_COUNT; [ $TANDEM_RESTART_COUNT = 4 ] && "
                           "kill -9 $$; touch \"$DONE\"",
                           env));
    supervisor.Start(Shell("worker 0", kWaitForDone, env));
    outcome = supervisor.Run();
  }
  std::ifstream log(std::string(dir_template) + "/worker-1.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  std::filesystem::remove_all(dir_template);
  EXPECT_EQ(outcome.exit_code, 0) << err.Text();
  EXPECT_EQ(outcome.replacements, 1) << err.Text();
  EXPECT_EQ(text, "count 4\ncount 5\n");
}

// Without the option nothing is replaced and nothing is said about it.
TEST(WorkerReplacementTest, WithoutTheOptionNothingIsReplaced) {
  MemoryFile out, err;
  SupervisorOptions options = Options(out, err);
  options.min_workers = 1;
  JobOutcome outcome;
  std::map<std::string, pid_t> pids;
  {
    ProcessSupervisor supervisor(options);
    pids["worker 1"] = supervisor.Start(Shell("worker 1", "kill -9 $$"));
    supervisor.Start(Shell("worker 0", FillPids(AfterReaped("worker 1") + "exit 0", pids)));
    outcome = supervisor.Run();
  }
  EXPECT_EQ(outcome.exit_code, 0) << err.Text();
  EXPECT_EQ(outcome.replacements, 0);
  EXPECT_THAT(err.Text(), Not(HasSubstr("replac")));
}

// The workers' hosts as a file says (the discovery script's part): the
// list when the file's text changed; a move runs `moved` on the new host.
class FileWorkerHosts : public WorkerHosts {
 public:
  // The job starts on the file's hosts as they are now.
  FileWorkerHosts(std::string path, std::string moved, std::map<std::string, std::string> env)
      : path_(std::move(path)), moved_(std::move(moved)), env_(std::move(env)) {
    Changed();
  }

  std::optional<std::vector<HostSlots>> Changed() override {
    if (initial_) {
      auto hosts = std::move(initial_);
      initial_.reset();
      return hosts;
    }
    std::ifstream in(path_);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.empty() || text == last_) return std::nullopt;
    last_ = text;
    if (!started_) {
      started_ = true;
      initial_ = ParseHostfile(text, path_);  // what the first call from the supervisor returns
      return std::nullopt;
    }
    return ParseHostfile(text, path_);
  }
  std::optional<std::string> TakeError() override { return std::nullopt; }
  ProcessSpec MoveTo(const ProcessSpec& worker, const HostSlots& host) override {
    std::map<std::string, std::string> env = env_;
    env["HOST"] = host.host;
    ProcessSpec spec = Shell(worker.label, moved_, env);
    spec.host = host.host;
    return spec;
  }

 private:
  std::string path_;
  std::string moved_;
  std::map<std::string, std::string> env_;
  std::string last_;
  bool started_ = false;
  std::optional<std::vector<HostSlots>> initial_;
};

// A host that leaves the list takes its worker out of the job (SIGTERM);
// the replacement waits for a free slot and starts on the host that
// appears, through WorkerHosts::MoveTo.
TEST(WorkerHostsTest, WorkersFollowTheDiscoveredHosts) {
  MemoryFile out, err;
  SupervisorOptions options = ReplacingOptions(out, err, 2, milliseconds(0));
  char dir_template[] = "/tmp/tandem-hosts-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  std::map<std::string, std::string> env = BaseEnv();
  env["DIR"] = dir;
  { std::ofstream(dir + "/hosts") << "h1\nh2\nh3\n"; }
  FileWorkerHosts hosts(dir + "/hosts",
                        "touch \"$DIR/moved-to-$HOST\"; while [ ! -e \"$DIR/done\" ]; do sleep "
                        "0.02; done",
                        env);
  options.worker_hosts = &hosts;
  JobOutcome outcome;
  {
    ProcessSupervisor supervisor(options);
    auto on = [&](const char* label, const char* host, const std::string& script) {
      ProcessSpec spec = Shell(label, script, env);
      spec.host = host;
      supervisor.Start(spec);
    };
    // Worker 0 takes h3 out of the list, then, once worker 2 has gone, adds h4.
    on("worker 0", "h1",
       "printf 'h1\\nh2\\n' > \"$DIR/hosts.new\"; mv \"$DIR/hosts.new\" \"$DIR/hosts\"; "
       "while [ ! -e \"$DIR/h3-stopped\" ]; do sleep 0.02; done; sleep 0.5; "
       "printf 'h1\\nh2\\nh4\\n' > \"$DIR/hosts.new\"; mv \"$DIR/hosts.new\" \"$DIR/hosts\"; "
       "while [ ! -e \"$DIR/moved-to-h4\" ]; do sleep 0.02; done; touch \"$DIR/done\"");
    on("worker 1", "h2", "while [ ! -e \"$DIR/done\" ]; do sleep 0.02; done");
    on("worker 2", "h3",
       "trap 'touch \"$DIR/h3-stopped\"; trap - TERM; kill -TERM $$' TERM; "
       "while true; do sleep 0.02; done");
    outcome = supervisor.Run();
  }
  const bool moved = std::filesystem::exists(dir + "/moved-to-h4");
  std::filesystem::remove_all(dir);
  EXPECT_TRUE(moved) << err.Text();
  EXPECT_EQ(outcome.exit_code, 0) << err.Text();
  EXPECT_EQ(outcome.replacements, 1) << err.Text();
  const std::string text = err.Text();
  EXPECT_THAT(text, ::testing::ContainsRegex(
                        "the discovered hosts are now h1:1, h2:1 \\(were h1:1, h2:1, h3:1\\)"));
  EXPECT_THAT(text, ::testing::ContainsRegex(
                        "worker 2 on h3 \\(pid [0-9]+\\) has no slot among the discovered hosts "
                        "\\(h3 is no longer listed\\): sending SIGTERM, it leaves the job"));
  EXPECT_THAT(text, HasSubstr("no discovered host has a free slot for worker 2 (h1:1, h2:1): it "
                              "starts when one has"));
  EXPECT_THAT(text, HasSubstr("the discovered hosts are now h1:1, h2:1, h4:1 (were h1:1, h2:1)"));
  EXPECT_THAT(text, ::testing::ContainsRegex(
                        "started the replacement for worker 2 on h4 \\(pid [0-9]+, replacement 1 "
                        "of 2\\)"));
}

// A host whose slots shrink stops its newest worker only.
TEST(WorkerHostsTest, FewerSlotsStopTheNewestWorkerOfTheHost) {
  MemoryFile out, err;
  SupervisorOptions options = ReplacingOptions(out, err, 0, milliseconds(0));
  char dir_template[] = "/tmp/tandem-slots-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  std::map<std::string, std::string> env = BaseEnv();
  env["DIR"] = dir;
  { std::ofstream(dir + "/hosts") << "h1:3\n"; }
  FileWorkerHosts hosts(dir + "/hosts", "exit 0", env);
  options.worker_hosts = &hosts;
  JobOutcome outcome;
  {
    ProcessSupervisor supervisor(options);
    for (const char* label : {"worker 0", "worker 1", "worker 2"}) {
      ProcessSpec spec =
          Shell(label,
                std::string(label) == "worker 0" ? "sleep 0.3; echo h1:2 > \"$DIR/hosts.new\"; mv "
                                                   "\"$DIR/hosts.new\" \"$DIR/hosts\"; sleep 1"
                                                 : "sleep 1",
                env);
      spec.host = "h1";
      supervisor.Start(spec);
    }
    outcome = supervisor.Run();
  }
  std::filesystem::remove_all(dir);
  EXPECT_EQ(outcome.exit_code, 0) << err.Text();
  EXPECT_THAT(err.Text(), ::testing::ContainsRegex(
                              "worker 2 on h1 \\(pid [0-9]+\\) has no slot among the discovered "
                              "hosts \\(h1 has 2 slots\\)"));
  EXPECT_THAT(err.Text(),
              Not(::testing::ContainsRegex("worker [01] on h1 \\(pid [0-9]+\\) has no")));
  EXPECT_THAT(err.Text(), HasSubstr("not replacing worker 2: no replacement left (0 of 0 used)"));
}

TEST(ProcessSupervisorTest, OwnLinesCarryTheLogTag) {
  MemoryFile out, err;
  {
    SupervisorOptions options = Options(out, err);
    options.log_tag = std::string(kRankExecLogTag);
    options.stamp_first_failure = true;
    ProcessSupervisor supervisor(options);
    ProcessSpec spec = Shell("worker 1", "exit 3");
    spec.host = "h2";
    supervisor.Start(spec);
    supervisor.Run();
  }
  EXPECT_THAT(err.Lines().back(),
              ::testing::MatchesRegex("\\[rank-exec\\] job failed: worker 1 on h2 \\(pid [0-9]+\\) "
                                      "exited with status 3"));
  // The first report says when; the parser gives the time and the rest.
  const std::string first = err.Lines().front();
  std::optional<RankFailureReport> report = ParseRankFailureReport(first);
  ASSERT_TRUE(report.has_value()) << first;
  EXPECT_THAT(std::string(report->description),
              ::testing::MatchesRegex("worker 1 on h2 \\(pid [0-9]+\\) exited with status 3"));
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_NEAR(report->seen_at, now, 60) << first;
}

struct DescriptionCase {
  const char* text;
  bool found;
  bool signaled;
  int number;
};

class ExitStatusFromDescriptionTest : public ::testing::TestWithParam<DescriptionCase> {};

TEST_P(ExitStatusFromDescriptionTest, ReadsWhatDescribeWrote) {
  const DescriptionCase& c = GetParam();
  std::optional<ExitStatus> s = ExitStatus::FromDescription(c.text);
  ASSERT_EQ(s.has_value(), c.found) << c.text;
  if (!s) return;
  EXPECT_EQ(s->signaled, c.signaled);
  EXPECT_EQ(c.signaled ? s->signal : s->code, c.number);
}

INSTANTIATE_TEST_SUITE_P(
    Texts, ExitStatusFromDescriptionTest,
    ::testing::Values(
        DescriptionCase{"worker 1 on h2 (pid 4) killed by signal 9 (SIGKILL)", true, true, 9},
        DescriptionCase{"server 0 (pid 4) exited with status 255", true, false, 255},
        DescriptionCase{"a (pid 1) exited with status 0", true, false, 0},
        DescriptionCase{"killed by signal 6 (SIGABRT), core dumped", true, true, 6},
        // The last phrase counts: the label may hold the words.
        DescriptionCase{"exited with status 1 (pid 2) killed by signal 15", true, true, 15},
        DescriptionCase{"exited with status x", false, false, 0},
        DescriptionCase{"job interrupted by SIGTERM", false, false, 0}));

TEST(ExitStatusTest, DescriptionRoundTrips) {
  for (const ExitStatus& s : {ExitStatus::Exited(0), ExitStatus::Exited(77), ExitStatus::Killed(9),
                              ExitStatus::Killed(15)}) {
    std::optional<ExitStatus> back = ExitStatus::FromDescription("x (pid 1) " + s.Describe());
    ASSERT_TRUE(back.has_value()) << s.Describe();
    EXPECT_EQ(back->ShellCode(), s.ShellCode()) << s.Describe();
  }
}

}  // namespace
}  // namespace tandem::launch
