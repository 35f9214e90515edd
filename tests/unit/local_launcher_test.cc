// Tests of the local launcher: --env parsing, option checks, the processes
// and environments of a job, and whole jobs of /bin/sh and env children.
#include "launch/local_launcher.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "launch/job_credentials.h"
#include "launch/job_restarts.h"
#include "support/memory_file.h"
#include "tandem/error.h"

namespace tandem::launch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Env = std::map<std::string, std::string>;

using tandem::testing::MemoryFile;

// The environment a process of the job must have, per the specification.
Env Expected(const Env& launcher, const std::string& role, int rank, int servers, int workers,
             const LocalJobIdentity& id, const Env& overrides = {}) {
  Env env = launcher;
  env.erase("DMLC_WORKER_ID");
  env.erase("DMLC_SERVER_ID");
  env["DMLC_ROLE"] = role;
  env["DMLC_PS_ROOT_URI"] = "127.0.0.1";
  env["DMLC_PS_ROOT_PORT"] = std::to_string(id.scheduler_port);
  env["DMLC_NUM_SERVER"] = std::to_string(servers);
  env["DMLC_NUM_WORKER"] = std::to_string(workers);
  env["DMLC_NODE_HOST"] = "127.0.0.1";
  env["TANDEM_SECRET"] = id.secret;
  env["TANDEM_JOB_ID"] = id.job_id;
  // torchrun's and Horovod's variables: workers only, all on this host.
  for (const char* stale : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT"}) env.erase(stale);
  if (role == "worker") {
    env["DMLC_WORKER_ID"] = std::to_string(rank);
    const std::string r = std::to_string(rank);
    const std::string n = std::to_string(workers);
    for (const char* name :
         {"RANK", "LOCAL_RANK", "ROLE_RANK", "HOROVOD_RANK", "HOROVOD_LOCAL_RANK"})
      env[name] = r;
    for (const char* name : {"WORLD_SIZE", "LOCAL_WORLD_SIZE", "ROLE_WORLD_SIZE", "HOROVOD_SIZE",
                             "HOROVOD_LOCAL_SIZE"})
      env[name] = n;
    env["GROUP_RANK"] = "0";
    env["GROUP_WORLD_SIZE"] = "1";
    env["MASTER_ADDR"] = "127.0.0.1";
    if (id.master_port != 0) env["MASTER_PORT"] = std::to_string(id.master_port);
  }
  if (role == "server") env["DMLC_SERVER_ID"] = std::to_string(rank);
  for (const auto& [k, v] : overrides) env[k] = v;
  return env;
}

TEST(ParseEnvAssignmentTest, SplitsAtTheFirstEqualsSign) {
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(ParseEnvAssignment("OMP_NUM_THREADS=4"), P("OMP_NUM_THREADS", "4"));
  EXPECT_EQ(ParseEnvAssignment("A=b=c"), P("A", "b=c"));
  EXPECT_EQ(ParseEnvAssignment("PATH=/a:/b"), P("PATH", "/a:/b"));
  EXPECT_EQ(ParseEnvAssignment("EMPTY="), P("EMPTY", ""));
  EXPECT_EQ(ParseEnvAssignment("_x1= spaced value "), P("_x1", " spaced value "));
}

TEST(ParseEnvAssignmentTest, AcceptsLaunchPyColonForm) {
  EXPECT_EQ(ParseEnvAssignment("OMP_NUM_THREADS:3"),
            std::make_pair(std::string("OMP_NUM_THREADS"), std::string("3")));
}

TEST(ParseEnvAssignmentTest, RejectsMalformedAssignments) {
  for (const char* bad : {"NOVALUE", "", "=value", "1A=2", "A B=1", "A-B=1", "é=1"}) {
    try {
      ParseEnvAssignment(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("--env '" + std::string(bad) + "'"));
    }
  }
}

TEST(ValidateLocalJobOptionsTest, RejectsBadCountsCommandsAndIds) {
  LocalJobOptions good;
  good.num_workers = 2;
  good.num_servers = 0;
  good.command = {"/bin/true"};
  EXPECT_NO_THROW(ValidateLocalJobOptions(good));

  auto expect_error = [](const LocalJobOptions& o, const std::string& fragment) {
    try {
      ValidateLocalJobOptions(o);
      ADD_FAILURE() << "no error; expected one mentioning " << fragment;
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr(fragment));
    }
  };
  LocalJobOptions o = good;
  o.num_workers = 0;
  expect_error(o, "at least 1 worker");
  o = good;
  o.num_servers = -1;
  expect_error(o, "-s/--num-servers is -1");
  o = good;
  o.command.clear();
  expect_error(o, "no command to run");
  o = good;
  o.command = {""};
  expect_error(o, "no command to run");
  o = good;
  o.env = {{"BAD NAME", "1"}};
  expect_error(o, "'BAD NAME' is not a variable name");
  o = good;
  o.job_id = std::string(1000, 'j');
  expect_error(o, "--job-id is 1000 bytes long");
  o = good;
  o.min_workers = 3;
  expect_error(o, "--workers 3:2: the minimum must be between 1 and the number of workers");
  o = good;
  o.min_workers = 1;
  o.rendezvous_in_worker = true;
  expect_error(o, "--workers 1:2 needs a scheduler process (-s SERVERS)");
  o = good;
  o.min_workers = 1;
  EXPECT_NO_THROW(ValidateLocalJobOptions(o));
  o.min_workers = 2;  // as many as the workers: not elastic, with or without a scheduler
  o.rendezvous_in_worker = true;
  EXPECT_NO_THROW(ValidateLocalJobOptions(o));
}

TEST(JobCredentialsTest, SecretsAre64HexDigitsAndDiffer) {
  const std::regex hex64("[0-9a-f]{64}");
  std::string a = GenerateJobSecret(), b = GenerateJobSecret();
  EXPECT_TRUE(std::regex_match(a, hex64)) << a;
  EXPECT_TRUE(std::regex_match(b, hex64)) << b;
  EXPECT_NE(a, b);
  std::string id1 = GenerateJobId(), id2 = GenerateJobId();
  EXPECT_TRUE(std::regex_match(id1, std::regex("job-[0-9a-f]{16}"))) << id1;
  EXPECT_NE(id1, id2);
}

TEST(PickFreeLoopbackPortTest, ReturnsAPortThatCanBeBound) {
  uint16_t port = PickFreeLoopbackPort();
  ASSERT_NE(port, 0);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0)
      << "port " << port << ": " << std::strerror(errno);
  ::close(fd);
}

struct PortRangeCase {
  std::pair<int, int> ephemeral;
  std::pair<int, int> expected;
};

class SchedulerPortRangeTest : public ::testing::TestWithParam<PortRangeCase> {};

TEST_P(SchedulerPortRangeTest, StaysOutsideTheEphemeralPorts) {
  const auto& c = GetParam();
  EXPECT_EQ(SchedulerPortRange(c.ephemeral), c.expected);
}

INSTANTIATE_TEST_SUITE_P(
    Ranges, SchedulerPortRangeTest,
    ::testing::Values(PortRangeCase{{32768, 60999}, {10000, 32767}},  // Linux's default
                      PortRangeCase{{1024, 65000}, {10000, 65535}},   // nothing outside: anywhere
                      PortRangeCase{{10000, 40000}, {40001, 65535}},  // only above
                      PortRangeCase{{50000, 60000}, {10000, 49999}}));

TEST(RandomSchedulerPortTest, IsOutsideThisHostsEphemeralPortsAndFreeHere) {
  const auto [low, high] = SchedulerPortRange(EphemeralPortRange());
  for (int i = 0; i < 50; ++i) {
    const uint16_t port = RandomSchedulerPort();
    ASSERT_GE(port, low);
    ASSERT_LE(port, high);
  }
}

TEST(RandomPortFreeHereTest, SkipsAPortAListenerHere) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int held = ntohs(addr.sin_port);
  ASSERT_LT(held, 65535);
  // Of {held, held + 1}, only held + 1 is free.
  {
    int probe = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in next = addr;
    next.sin_port = htons(static_cast<uint16_t>(held + 1));
    const bool free = ::bind(probe, reinterpret_cast<const sockaddr*>(&next), sizeof(next)) == 0;
    ::close(probe);
    if (!free) {
      ::close(fd);
      GTEST_SKIP() << "port " << held + 1 << " is busy too";
    }
  }
  for (int i = 0; i < 100; ++i) {
    const uint16_t port = RandomPortFreeHere({held, held + 1});
    ASSERT_EQ(port, held + 1) << "draw " << i << " (port " << held << " has a listener)";
  }
  ::close(fd);
}

TEST(CurrentExecutablePathTest, IsThisTestBinary) {
  std::string path = CurrentExecutablePath();
  EXPECT_EQ(path.front(), '/');
  EXPECT_THAT(path, HasSubstr("tandem_unit_tests"));
}

TEST(BuildLocalJobTest, BuildsSchedulerServersAndWorkersWithTheirEnvironments) {
  LocalJobOptions o;
  o.num_workers = 2;
  o.num_servers = 2;
  o.command = {"python3", "train.py", "--lr", "0.1"};
  o.tandem_binary = "/opt/tandem/bin/tandem";
  o.env = {{"OMP_NUM_THREADS", "2"}, {"FROM_LAUNCHER", "overridden"}, {"OMP_NUM_THREADS", "3"}};
  LocalJobIdentity id{4242, std::string(64, 'a'), "job-test"};
  id.master_port = 4343;
  // A stale DMLC_WORKER_ID (or RANK, ...) of the launcher's own must not
  // reach anyone.
  Env launcher = {{"HOME", "/home/u"},     {"FROM_LAUNCHER", "yes"}, {"RANK", "5"},
                  {"WORLD_SIZE", "9"},     {"LOCAL_RANK", "3"},      {"MASTER_PORT", "1"},
                  {"DMLC_WORKER_ID", "9"}, {"DMLC_SERVER_ID", "7"},  {"DMLC_ROLE", "worker"}};

  auto specs = BuildLocalJob(o, id, launcher);
  ASSERT_EQ(specs.size(), 5u);
  std::vector<std::string> labels;
  for (const auto& s : specs) labels.push_back(s.label);
  EXPECT_THAT(labels, ElementsAre("scheduler", "server 0", "server 1", "worker 0", "worker 1"));

  const Env overrides = {{"OMP_NUM_THREADS", "3"}, {"FROM_LAUNCHER", "overridden"}};
  EXPECT_EQ(specs[0].argv, (std::vector<std::string>{"/opt/tandem/bin/tandem", "scheduler"}));
  EXPECT_EQ(specs[0].env, Expected(launcher, "scheduler", 0, 2, 2, id, overrides));
  for (int i = 0; i < 2; ++i) {
    const auto& server = specs[1 + i];
    EXPECT_EQ(server.argv, (std::vector<std::string>{"/opt/tandem/bin/tandem", "server"}));
    EXPECT_EQ(server.env, Expected(launcher, "server", i, 2, 2, id, overrides));
    EXPECT_EQ(server.env.at("DMLC_SERVER_ID"), std::to_string(i));
    EXPECT_EQ(server.env.count("DMLC_WORKER_ID"), 0u);
  }
  for (int i = 0; i < 2; ++i) {
    const auto& worker = specs[3 + i];
    EXPECT_EQ(worker.argv, o.command);
    EXPECT_EQ(worker.env, Expected(launcher, "worker", i, 2, 2, id, overrides));
    EXPECT_EQ(worker.env.at("DMLC_WORKER_ID"), std::to_string(i));
    EXPECT_EQ(worker.env.count("DMLC_SERVER_ID"), 0u);
  }
  EXPECT_EQ(specs[0].env.count("DMLC_WORKER_ID"), 0u);
  EXPECT_EQ(specs[0].env.at("OMP_NUM_THREADS"), "3");  // the later --env wins
}

TEST(BuildLocalJobTest, EnvOverridesEvenTheContract) {
  LocalJobOptions o;
  o.num_workers = 1;
  o.command = {"/bin/true"};
  o.tandem_binary = "/bin/tandem";
  o.env = {{"DMLC_NODE_HOST", "10.1.2.3"}};
  auto specs = BuildLocalJob(o, {1, "s", "j"}, {});
  for (const auto& s : specs) EXPECT_EQ(s.env.at("DMLC_NODE_HOST"), "10.1.2.3") << s.label;
}

TEST(BuildLocalJobTest, NoServersAndCommandRunningAllRoles) {
  LocalJobOptions o;
  o.num_workers = 3;
  o.num_servers = 0;
  o.command = {"./my_program", "--flag"};
  o.command_runs_all_roles = true;
  auto specs = BuildLocalJob(o, {1, "s", "j"}, {});
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(specs[0].label, "scheduler");
  for (const auto& s : specs) {
    EXPECT_EQ(s.argv, o.command) << s.label;
    EXPECT_EQ(s.env.at("DMLC_NUM_SERVER"), "0");
    EXPECT_EQ(s.env.at("DMLC_NUM_WORKER"), "3");
  }
  EXPECT_EQ(specs[3].label, "worker 2");
}

// TANDEM_MIN_WORKERS in every process: the job's minimum when it is elastic
// (--workers MIN:MAX with MIN < MAX), else absent, even when the launcher
// inherited one; an --env of it still wins.
struct MinWorkersCase {
  const char* name;
  int min_workers;
  std::string inherited;  // the launcher's own TANDEM_MIN_WORKERS; "" for none
  std::string env;        // --env TANDEM_MIN_WORKERS=...; "" for none
  std::string expected;   // "" for absent
};

class MinWorkersVariableTest : public ::testing::TestWithParam<MinWorkersCase> {};

TEST_P(MinWorkersVariableTest, EveryProcessGetsTheJobsMinimumOrNone) {
  const MinWorkersCase& c = GetParam();
  LocalJobOptions o;
  o.num_workers = 4;
  o.num_servers = 2;
  o.min_workers = c.min_workers;
  o.command = {"/bin/true"};
  o.tandem_binary = "/bin/tandem";
  if (!c.env.empty()) o.env = {{"TANDEM_MIN_WORKERS", c.env}};
  Env launcher = {{"HOME", "/home/u"}};
  if (!c.inherited.empty()) launcher["TANDEM_MIN_WORKERS"] = c.inherited;
  const auto specs = BuildLocalJob(o, {1, "s", "j"}, launcher);
  ASSERT_EQ(specs.size(), 7u);
  for (const auto& s : specs) {
    if (c.expected.empty()) {
      EXPECT_EQ(s.env.count("TANDEM_MIN_WORKERS"), 0u) << s.label;
    } else {
      ASSERT_EQ(s.env.count("TANDEM_MIN_WORKERS"), 1u) << s.label;
      EXPECT_EQ(s.env.at("TANDEM_MIN_WORKERS"), c.expected) << s.label;
    }
    EXPECT_EQ(s.env.at("DMLC_NUM_WORKER"), "4") << s.label;  // MAX workers start
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MinWorkersVariableTest,
    ::testing::Values(MinWorkersCase{"Elastic", 3, "", "", "3"},
                      MinWorkersCase{"ElasticOverAnInheritedOne", 3, "1", "", "3"},
                      MinWorkersCase{"DownToOne", 1, "", "", "1"},
                      MinWorkersCase{"NotGiven", 0, "", "", ""},
                      MinWorkersCase{"NotGivenDropsAnInheritedOne", 0, "2", "", ""},
                      MinWorkersCase{"AsManyAsTheWorkersIsNotElastic", 4, "2", "", ""},
                      MinWorkersCase{"EnvWins", 3, "", "2", "2"}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

// Parses "[label] NAME=VALUE" lines of `env` children into one map per label.
std::map<std::string, Env> EnvironmentsByLabel(const std::vector<std::string>& lines) {
  std::map<std::string, Env> result;
  const std::regex line_re("\\[([a-z]+(?: [0-9]+)?)\\] ([A-Za-z_][A-Za-z0-9_]*)=(.*)");
  for (const auto& line : lines) {
    std::smatch m;
    if (std::regex_match(line, m, line_re)) result[m[1]][m[2]] = m[3];
  }
  return result;
}

TEST(RunLocalJobTest, EveryRoleGetsExactlyTheSpecifiedEnvironment) {
  MemoryFile out, err;
  SupervisorOptions supervisor;
  supervisor.stdout_fd = out.fd();
  supervisor.stderr_fd = err.fd();
  LocalJobOptions o;
  o.num_workers = 3;
  o.num_servers = 2;
  o.command = {"/usr/bin/env"};
  o.command_runs_all_roles = true;
  o.job_id = "job-env-test";
  o.env = {{"EXTRA", "from --env"}, {"SHARED", "overridden"}};
  const Env launcher = {{"SHARED", "launcher"}, {"KEEP", "kept"}, {"DMLC_WORKER_ID", "77"}};

  ASSERT_EQ(RunLocalJob(o, supervisor, base::Environment(launcher)), 0) << err.Text();

  auto envs = EnvironmentsByLabel(out.Lines());
  ASSERT_EQ(envs.size(), 6u) << out.Text();
  LocalJobIdentity id;
  id.job_id = "job-env-test";
  id.secret = envs["scheduler"]["TANDEM_SECRET"];
  EXPECT_TRUE(std::regex_match(id.secret, std::regex("[0-9a-f]{64}"))) << id.secret;
  int port = std::stoi(envs["scheduler"]["DMLC_PS_ROOT_PORT"]);
  ASSERT_GT(port, 0);
  ASSERT_LT(port, 65536);
  id.scheduler_port = static_cast<uint16_t>(port);
  // MASTER_PORT: a second port, the same for every worker, not the scheduler's.
  const int master = std::stoi(envs["worker 0"]["MASTER_PORT"]);
  ASSERT_TRUE(master > 0 && master < 65536 && master != port) << master;
  id.master_port = static_cast<uint16_t>(master);
  const Env overrides = {{"EXTRA", "from --env"}, {"SHARED", "overridden"}};
  // The first (and only) attempt: restart 0 of 0 (job_restarts.h).
  const Env attempt = AttemptEnvironment(launcher, 0, 0);

  EXPECT_EQ(envs["scheduler"], Expected(attempt, "scheduler", 0, 2, 3, id, overrides));
  EXPECT_EQ(envs["server 0"], Expected(attempt, "server", 0, 2, 3, id, overrides));
  EXPECT_EQ(envs["server 1"], Expected(attempt, "server", 1, 2, 3, id, overrides));
  EXPECT_EQ(envs["worker 0"], Expected(attempt, "worker", 0, 2, 3, id, overrides));
  EXPECT_EQ(envs["worker 1"], Expected(attempt, "worker", 1, 2, 3, id, overrides));
  EXPECT_EQ(envs["worker 2"], Expected(attempt, "worker", 2, 2, 3, id, overrides));
  EXPECT_EQ(envs["worker 2"]["TANDEM_RESTART_COUNT"], "0");
  EXPECT_THAT(err.Text(), HasSubstr("[launcher] job job-env-test: scheduler at 127.0.0.1:" +
                                    std::to_string(port) + ", 2 servers, 3 workers"));
  // The secret never appears in the launcher's own messages.
  EXPECT_THAT(err.Text(), ::testing::Not(HasSubstr(id.secret)));
}

TEST(RunLocalJobTest, SchedulerAndServersRunTheBuiltInRoles) {
  MemoryFile out, err;
  SupervisorOptions supervisor;
  supervisor.stdout_fd = out.fd();
  supervisor.stderr_fd = err.fd();
  LocalJobOptions o;
  o.num_workers = 1;
  o.num_servers = 2;
  o.command = {"/bin/sh", "-c", "echo I am worker $DMLC_WORKER_ID"};
  // Stands in for the tandem binary: prints the subcommand it was given.
  o.tandem_binary = "/bin/echo";
  ASSERT_EQ(RunLocalJob(o, supervisor, base::Environment(Env{})), 0) << err.Text();
  auto lines = out.Lines();
  std::sort(lines.begin(), lines.end());
  EXPECT_THAT(lines, ElementsAre("[scheduler] scheduler", "[server 0] server", "[server 1] server",
                                 "[worker 0] I am worker 0"));
}

TEST(RunLocalJobTest, ReturnsTheFirstFailuresCode) {
  MemoryFile out, err;
  SupervisorOptions supervisor;
  supervisor.stdout_fd = out.fd();
  supervisor.stderr_fd = err.fd();
  supervisor.teardown_grace = std::chrono::milliseconds(200);
  supervisor.kill_delay = std::chrono::milliseconds(500);
  LocalJobOptions o;
  o.num_workers = 1;
  o.num_servers = 1;
  o.command = {"/bin/sh", "-c", "echo failing >&2; exit 7"};
  // Stands in for the tandem binary: the scheduler and the server wait
  // until they are told to stop, as real ones would after losing a worker.
  char script[] = "/tmp/tandem-role-XXXXXX";
  int fd = ::mkstemp(script);
  ASSERT_GE(fd, 0);
  const std::string body = "#!/bin/sh\nexec sleep 1000\n";
  ASSERT_EQ(::write(fd, body.data(), body.size()), static_cast<ssize_t>(body.size()));
  ::fchmod(fd, 0700);
  ::close(fd);
  o.tandem_binary = script;

  EXPECT_EQ(RunLocalJob(o, supervisor, base::Environment(Env{{"PATH", "/usr/bin:/bin"}})), 7);
  ::unlink(script);
  auto lines = err.Lines();
  ASSERT_FALSE(lines.empty());
  EXPECT_THAT(lines.back(),
              ::testing::MatchesRegex("\\[launcher\\] job failed: worker 0 \\(pid [0-9]+\\) exited "
                                      "with status 7: failing"));
  EXPECT_THAT(err.Text(), HasSubstr("[worker 0] failing"));
  EXPECT_THAT(err.Text(), ::testing::ContainsRegex("scheduler \\(pid [0-9]+\\) killed by signal "
                                                   "15 \\(SIGTERM\\)"));
}

TEST(RunLocalJobTest, AMissingProgramFailsBeforeAnythingStarts) {
  MemoryFile out, err;
  SupervisorOptions supervisor;
  supervisor.stdout_fd = out.fd();
  supervisor.stderr_fd = err.fd();
  LocalJobOptions o;
  o.num_workers = 1;
  o.command = {"tandem-surely-not-a-program"};
  o.tandem_binary = "/bin/true";
  try {
    RunLocalJob(o, supervisor, base::Environment(Env{{"PATH", "/usr/bin:/bin"}}));
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'tandem-surely-not-a-program' not found"));
    EXPECT_THAT(e.what(), HasSubstr("PATH=/usr/bin:/bin"));
  }
  EXPECT_TRUE(out.Lines().empty());
  EXPECT_TRUE(err.Lines().empty());
}

}  // namespace
}  // namespace tandem::launch
