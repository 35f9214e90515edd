// The pieces of the ssh launcher that need no network: hostfiles, shell
// quoting, placement, the remote environment header and the specs built.
#include "launch/ssh_launcher.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "launch/hostfile.h"
#include "launch/remote_exec.h"
#include "tandem/error.h"

namespace tandem::launch {
namespace {

TEST(Hostfile, ReadsEveryFormWithCommentsAndBlankLines) {
  auto hosts = ParseHostfile(
      "# cluster\n\nnode1\nnode2:4   # four\nnode3 slots=2\nalice@node4:2\n[fd00::5]:3\n", "hf");
  ASSERT_EQ(hosts.size(), 5u);
  EXPECT_EQ(hosts[0].login, "node1");
  EXPECT_EQ(hosts[0].slots, 1);
  EXPECT_EQ(hosts[1].slots, 4);
  EXPECT_EQ(hosts[2].host, "node3");
  EXPECT_EQ(hosts[2].slots, 2);
  EXPECT_EQ(hosts[3].login, "alice@node4");
  EXPECT_EQ(hosts[3].host, "node4");
  EXPECT_EQ(hosts[4].host, "fd00::5");
  EXPECT_EQ(hosts[4].slots, 3);
}

class BadHostfile : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(BadHostfile, NamesTheLineAndTheProblem) {
  try {
    ParseHostfile(GetParam().first, "hosts.txt");
    FAIL() << "accepted " << GetParam().first;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(GetParam().second), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadHostfile,
    ::testing::Values(std::make_pair("a\nb:0\n", "hosts.txt line 2: slot count '0'"),
                      std::make_pair("a slots=x\n", "slot count 'x'"),
                      std::make_pair("a cpus=2\n", "'cpus=2' is not understood"),
                      std::make_pair("a\na\n", "listed twice"),
                      std::make_pair("# nothing\n\n", "names no host"),
                      std::make_pair("a:2 slots=3\n", "give the slots once"),
                      std::make_pair("[fd00::1\n", "'[' without ']'")));

TEST(ShellQuote, LeavesPlainWordsAndQuotesTheRest) {
  EXPECT_EQ(ShellQuote("/usr/bin/tandem"), "/usr/bin/tandem");
  EXPECT_EQ(ShellQuote("--lr=0.1"), "--lr=0.1");
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("a b"), "'a b'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote("$HOME;rm -rf /"), "'$HOME;rm -rf /'");
}

// The quoted words, given to /bin/sh, come back exactly.
TEST(ShellQuote, RoundTripsThroughTheShell) {
  const std::vector<std::string> words = {"a b",       "it's", "$x", "\"q\"",     "back\\slash",
                                          "new\nline", "*",    "",   "tab\there", "!event"};
  std::string script = "printf '%s\\0'";
  for (const auto& w : words) script += " " + ShellQuote(w);
  FILE* p = ::popen(("/bin/sh -c " + ShellQuote(script)).c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[256];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  ::pclose(p);
  std::vector<std::string> got;
  size_t start = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == '\0') {
      got.push_back(out.substr(start, i - start));
      start = i + 1;
    }
  }
  EXPECT_EQ(got, words);
}

SshJobOptions ThreeHosts(int workers, int servers) {
  SshJobOptions o;
  o.hosts = ParseHostfile("h1\nh2:2\nh3 slots=2\n", "test");
  o.job.num_workers = workers;
  o.job.num_servers = servers;
  o.job.command = {"train", "--epochs", "3 4"};
  o.job.tandem_binary = "/opt/tandem/bin/tandem";
  o.remote_directory = "/work dir";
  return o;
}

TEST(PlaceSshJob, SchedulerFirstServersRoundRobinWorkersBySlot) {
  // scheduler; servers 0..2; workers 0..6 over slots h1, h2, h2, h3, h3, then again.
  EXPECT_EQ(PlaceSshJob(ThreeHosts(7, 3)), (std::vector<size_t>{0, 0, 1, 2, 0, 1, 1, 2, 2, 0, 1}));
}

// The environment a process of BuildSshJob gets on its host: the header
// remote-exec reads from its stdin.
std::map<std::string, std::string> RemoteEnvironmentOf(const ProcessSpec& spec) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  EXPECT_EQ(::write(fds[1], spec.stdin_data->data(), spec.stdin_data->size()),
            static_cast<ssize_t>(spec.stdin_data->size()));
  auto env = ReadRemoteEnvironment(fds[0], std::chrono::seconds(5));
  ::close(fds[0]);
  ::close(fds[1]);
  return env;
}

TEST(BuildSshJob, EnvironmentTravelsOnStdinAndTheCommandIsQuoted) {
  SshJobOptions o = ThreeHosts(2, 1);
  o.ssh_args = {"-p", "2222"};
  o.forward_env = {"MY_VAR"};
  o.job.env = {{"EXTRA", "x y"}};
  LocalJobIdentity id{4242, "secret-hex", "job-1"};
  std::map<std::string, std::string> launcher_env = {
      {"PATH", "/bin"}, {"MY_VAR", "v"}, {"PS_VERBOSE", "1"}, {"UNRELATED", "no"}};
  auto specs = BuildSshJob(o, id, launcher_env);
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(specs[0].label, "scheduler");
  const ProcessSpec& w1 = specs[3];
  EXPECT_EQ(w1.label, "worker 1");
  EXPECT_EQ(w1.argv, (std::vector<std::string>{
                         "ssh", "-o", "BatchMode=yes", "-p", "2222", "h2",
                         "exec /opt/tandem/bin/tandem remote-exec --label 'worker 1' --cwd "
                         "'/work dir' -- train --epochs '3 4'"}));
  // No secret on any command line.
  for (const auto& spec : specs) {
    for (const auto& a : spec.argv) EXPECT_EQ(a.find("secret-hex"), std::string::npos) << a;
  }
  // The header on stdin decodes to the contract, the secret and the forwarded variables.
  auto env = RemoteEnvironmentOf(w1);
  EXPECT_EQ(env["DMLC_ROLE"], "worker");
  EXPECT_EQ(env["DMLC_WORKER_ID"], "1");
  EXPECT_EQ(env["DMLC_PS_ROOT_URI"], "h1");
  EXPECT_EQ(env["DMLC_PS_ROOT_PORT"], "4242");
  EXPECT_EQ(env["TANDEM_SECRET"], "secret-hex");
  EXPECT_EQ(env["MY_VAR"], "v");
  EXPECT_EQ(env["PS_VERBOSE"], "1");
  EXPECT_EQ(env["EXTRA"], "x y");
  EXPECT_EQ(env.count("UNRELATED"), 0u);
  EXPECT_EQ(env.count("DMLC_NODE_HOST"), 0u);
  EXPECT_EQ(env.count("PATH"), 0u);
}

// --workers MIN:MAX reaches every process on every host as
// TANDEM_MIN_WORKERS; without it, a copy in the launcher's environment
// (which the ssh launcher otherwise forwards with every TANDEM_*) does not.
TEST(BuildSshJob, TheMinimumOfAnElasticJobReachesEveryProcessAndNoInheritedOne) {
  LocalJobIdentity id{4242, "secret-hex", "job-1"};
  const std::map<std::string, std::string> launcher_env = {{"TANDEM_MIN_WORKERS", "1"},
                                                           {"TANDEM_OTHER", "kept"}};
  SshJobOptions elastic = ThreeHosts(4, 1);
  elastic.job.min_workers = 3;
  const auto specs = BuildSshJob(elastic, id, launcher_env);
  ASSERT_EQ(specs.size(), 6u);
  for (const auto& spec : specs) {
    const auto env = RemoteEnvironmentOf(spec);
    EXPECT_EQ(env.at("TANDEM_MIN_WORKERS"), "3") << spec.label;
    EXPECT_EQ(env.at("TANDEM_OTHER"), "kept") << spec.label;
  }
  SshJobOptions fixed = ThreeHosts(4, 1);
  for (int min : {0, 4}) {
    fixed.job.min_workers = min;
    for (const auto& spec : BuildSshJob(fixed, id, launcher_env)) {
      const auto env = RemoteEnvironmentOf(spec);
      EXPECT_EQ(env.count("TANDEM_MIN_WORKERS"), 0u) << spec.label << " min " << min;
      EXPECT_EQ(env.at("TANDEM_OTHER"), "kept") << spec.label;
    }
  }
}

// torchrun's and Horovod's variables of ThreeHosts(7, 3)'s processes:
// workers 0..6 go to h1, h2, h2, h3, h3, h1, h2, so the hosts are numbered
// h1, h2, h3 (GROUP_RANK) and each worker's LOCAL_RANK counts the workers
// before it on its host; MASTER_ADDR is worker 0's host. Process 2 is
// server 1, which gets none of them. "-" marks an absent variable.
struct SshPlacementCase {
  size_t process;
  std::map<std::string, std::string> expected;
};

class SshWorkerVariables : public ::testing::TestWithParam<SshPlacementCase> {};

TEST_P(SshWorkerVariables, FollowTheSlots) {
  const SshPlacementCase& c = GetParam();
  LocalJobIdentity id{4242, "secret-hex", "job-1"};
  id.master_port = 4343;
  auto specs = BuildSshJob(ThreeHosts(7, 3), id, {{"RANK", "9"}, {"MASTER_PORT", "1"}});
  ASSERT_LT(c.process, specs.size());
  auto env = RemoteEnvironmentOf(specs[c.process]);
  for (const auto& [name, value] : c.expected) {
    if (value == "-") {
      EXPECT_EQ(env.count(name), 0u) << name << " of " << specs[c.process].label;
    } else {
      EXPECT_EQ(env[name], value) << name << " of " << specs[c.process].label;
    }
  }
}

std::map<std::string, std::string> SshWorker(int rank, int local, int local_size, int group) {
  const std::string r = std::to_string(rank), l = std::to_string(local),
                    n = std::to_string(local_size);
  return {{"RANK", r},
          {"WORLD_SIZE", "7"},
          {"LOCAL_RANK", l},
          {"LOCAL_WORLD_SIZE", n},
          {"GROUP_RANK", std::to_string(group)},
          {"GROUP_WORLD_SIZE", "3"},
          {"HOROVOD_RANK", r},
          {"HOROVOD_SIZE", "7"},
          {"HOROVOD_LOCAL_RANK", l},
          {"HOROVOD_LOCAL_SIZE", n},
          {"MASTER_ADDR", "h1"},
          {"MASTER_PORT", "4343"},
          {"DMLC_WORKER_ID", r}};
}

INSTANTIATE_TEST_SUITE_P(Processes, SshWorkerVariables,
                         ::testing::Values(SshPlacementCase{4, SshWorker(0, 0, 2, 0)},
                                           SshPlacementCase{6, SshWorker(2, 1, 3, 1)},
                                           SshPlacementCase{8, SshWorker(4, 1, 2, 2)},
                                           SshPlacementCase{9, SshWorker(5, 1, 2, 0)},
                                           SshPlacementCase{10, SshWorker(6, 2, 3, 1)},
                                           SshPlacementCase{2,
                                                            {{"DMLC_ROLE", "server"},
                                                             {"RANK", "-"},
                                                             {"WORLD_SIZE", "-"},
                                                             {"LOCAL_RANK", "-"},
                                                             {"HOROVOD_RANK", "-"},
                                                             {"MASTER_ADDR", "-"},
                                                             {"MASTER_PORT", "-"}}}),
                         [](const auto& param_info) {
                           return "process" + std::to_string(param_info.param.process);
                         });

TEST(RemoteEnvironment, RoundTripsAnyBytesAndRejectsGarbage) {
  std::map<std::string, std::string> vars = {
      {"A", "1"}, {"B", std::string("x\0y\n,:", 6)}, {"C", ""}};
  std::string header = EncodeRemoteEnvironment(vars) + "trailing bytes stay unread";
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::write(fds[1], header.data(), header.size()), static_cast<ssize_t>(header.size()));
  EXPECT_EQ(ReadRemoteEnvironment(fds[0], std::chrono::seconds(5)), vars);
  char rest[64];
  ssize_t n = ::read(fds[0], rest, sizeof(rest));
  EXPECT_EQ(std::string(rest, static_cast<size_t>(n)), "trailing bytes stay unread");
  ::close(fds[0]);
  ::close(fds[1]);

  for (const std::string bad : {"HELLO\n", "TANDEM-ENV/1\nx:", "TANDEM-ENV/1\n3:abc,",
                                "TANDEM-ENV/1\n9999999:", "TANDEM-ENV/1\n3:A=1;"}) {
    ASSERT_EQ(::pipe(fds), 0);
    ASSERT_EQ(::write(fds[1], bad.data(), bad.size()), static_cast<ssize_t>(bad.size()));
    ::close(fds[1]);
    EXPECT_THROW(ReadRemoteEnvironment(fds[0], std::chrono::seconds(5)), ProtocolError) << bad;
    ::close(fds[0]);
  }
  EXPECT_THROW(EncodeRemoteEnvironment({{"BAD-NAME", "x"}}), InvalidArgument);
}

TEST(RemoteEnvironment, ASilentLauncherTimesOut) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  EXPECT_THROW(ReadRemoteEnvironment(fds[0], std::chrono::milliseconds(100)), Timeout);
  ::close(fds[0]);
  ::close(fds[1]);
}

// remote-exec stops its command when the watched descriptor reaches its end.
// RunRemoteExec leaves the signals it handles blocked (`tandem remote-exec`
// exits right after it); the tests put the mask back, or the children of
// later tests in this binary would start with SIGTERM blocked.
int RunRemoteExecKeepingTheSignalMask(const RemoteExecOptions& options) {
  sigset_t saved;
  EXPECT_EQ(::pthread_sigmask(SIG_SETMASK, nullptr, &saved), 0);
  const int code = RunRemoteExec(options);
  ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  return code;
}

TEST(RunRemoteExec, StopsTheCommandWhenTheLauncherGoesAway) {
  int fds[2];
  // Close-on-exec: the command must not inherit the write end (in real use
  // only ssh holds it).
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  RemoteExecOptions o;
  o.command = {"/bin/sleep", "30"};
  o.environment = {{"PATH", "/bin:/usr/bin"}};
  o.grace = std::chrono::milliseconds(500);
  o.watch_fd = fds[0];
  std::thread closer([w = fds[1]] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::close(w);
  });
  auto start = std::chrono::steady_clock::now();
  int code = RunRemoteExecKeepingTheSignalMask(o);
  closer.join();
  ::close(fds[0]);
  EXPECT_EQ(code, 128 + SIGTERM);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(RunRemoteExec, ReturnsTheCommandsExitCodeInItsDirectory) {
  int fds[2];
  // Close-on-exec: the command must not inherit the write end (in real use
  // only ssh holds it).
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  RemoteExecOptions o;
  o.command = {"/bin/sh", "-c", "test \"$(pwd)\" = /tmp && test \"$X\" = 7 && exit 3"};
  o.environment = {{"PATH", "/bin:/usr/bin"}, {"X", "7"}};
  o.working_directory = "/tmp";
  o.watch_fd = fds[0];
  EXPECT_EQ(RunRemoteExecKeepingTheSignalMask(o), 3);
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace
}  // namespace tandem::launch
