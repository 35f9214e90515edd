#include "launch/local_launcher.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <limits.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>

#include "base/unique_fd.h"
#include "launch/elastic_workers.h"
#include "launch/job_credentials.h"
#include "launch/job_restarts.h"
#include "launch/rank_timeline.h"
#include "launch/worker_variables.h"
#include "net/hmac_handshake.h"
#include "tandem/error.h"

namespace tandem::launch {
namespace {

constexpr const char* kLoopback = "127.0.0.1";

bool IsVariableName(std::string_view name) {
  if (name.empty()) return false;
  auto alpha = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (!alpha(name[0])) return false;
  for (char c : name) {
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  }
  return true;
}

std::map<std::string, std::string> RoleEnvironment(
    const LocalJobOptions& options, const LocalJobIdentity& identity,
    const std::map<std::string, std::string>& launcher_env, std::string_view role, int rank) {
  std::map<std::string, std::string> env = launcher_env;
  for (const auto& name : WorkerVariableNames()) env.erase(name);
  env.erase("DMLC_WORKER_ID");
  env.erase("DMLC_SERVER_ID");
  // The launcher's to set: a copy it inherited would make the scheduler let
  // workers leave a job whose launcher tears it down when one fails.
  env.erase("TANDEM_MIN_WORKERS");
  env["DMLC_ROLE"] = std::string(role);
  env["DMLC_PS_ROOT_URI"] = kLoopback;
  env["DMLC_PS_ROOT_PORT"] = std::to_string(identity.scheduler_port);
  env["DMLC_NUM_SERVER"] = std::to_string(options.num_servers);
  env["DMLC_NUM_WORKER"] = std::to_string(options.num_workers);
  env["DMLC_NODE_HOST"] = kLoopback;
  env["TANDEM_SECRET"] = identity.secret;
  env["TANDEM_JOB_ID"] = identity.job_id;
  if (IsElastic(options.min_workers, options.num_workers)) {
    env["TANDEM_MIN_WORKERS"] = std::to_string(options.min_workers);
  }
  if (role == "worker") {
    env["DMLC_WORKER_ID"] = std::to_string(rank);
    // All on this host; the ssh launcher and rank-exec place them again.
    WorkerPlacement p{rank, options.num_workers, rank, options.num_workers, 0, 1};
    for (auto& [name, value] : WorkerVariables(p, kLoopback, identity.master_port)) {
      env[name] = value;
    }
  }
  if (options.rendezvous_in_worker) env["TANDEM_RENDEZVOUS_IN_PROCESS"] = "1";
  if (role == "server") env["DMLC_SERVER_ID"] = std::to_string(rank);
  for (const auto& [key, value] : options.env) env[key] = value;
  return env;
}

std::vector<std::string> BuiltInRole(const LocalJobOptions& options, const char* role) {
  if (options.command_runs_all_roles) return options.command;
  return {options.tandem_binary, role};
}

}  // namespace

LocalJobIdentity NewJobIdentity(const std::string& job_id, uint16_t scheduler_port) {
  LocalJobIdentity identity;
  identity.scheduler_port = scheduler_port;
  identity.secret = GenerateJobSecret();
  identity.job_id = job_id.empty() ? GenerateJobId() : job_id;
  return identity;
}

uint16_t MasterPortBeside(uint16_t scheduler_port, const std::function<uint16_t()>& draw) {
  uint16_t port = draw();
  for (int attempt = 0; attempt < 64 && port == scheduler_port; ++attempt) port = draw();
  return port;
}

std::pair<int, int> EphemeralPortRange() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  int high = 0;
  if (in >> low >> high && low > 0 && high >= low && high <= 65535) return {low, high};
  return {32768, 60999};  // Linux's default
}

std::pair<int, int> SchedulerPortRange(std::pair<int, int> ephemeral) {
  const auto [low, high] = ephemeral;
  // The widest stretch outside the ephemeral range, above the well-known ports.
  const int below = low - 1 - 10000;
  const int above = 65535 - high;
  if (below >= above && below >= 1000) return {10000, low - 1};
  if (above >= 1000) return {high + 1, 65535};
  return {10000, 65535};
}

bool PortFreeHere(uint16_t port) {
  base::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return true;  // cannot tell; the scheduler's own bind will say
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  return ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
}

uint16_t RandomSchedulerPort() {
  return RandomPortFreeHere(SchedulerPortRange(EphemeralPortRange()));
}

uint16_t RandomPortFreeHere(std::pair<int, int> range) {
  const auto [low, high] = range;
  std::random_device rd;
  uint16_t port = 0;
  for (int attempt = 0; attempt < 64; ++attempt) {
    port = static_cast<uint16_t>(low + rd() % static_cast<unsigned>(high - low + 1));
    if (PortFreeHere(port)) return port;
  }
  return port;
}

std::pair<std::string, std::string> ParseEnvAssignment(std::string_view text) {
  size_t sep = text.find('=');
  if (sep == std::string_view::npos) sep = text.find(':');
  if (sep == std::string_view::npos) {
    throw InvalidArgument(fmt::format(
        "--env '{}' is not of the form NAME=VALUE (e.g. --env OMP_NUM_THREADS=4)", text));
  }
  std::string name(text.substr(0, sep));
  if (!IsVariableName(name)) {
    throw InvalidArgument(fmt::format(
        "--env '{}': '{}' is not a variable name (letters, digits and '_', not starting with a "
        "digit)",
        text, name));
  }
  return {name, std::string(text.substr(sep + 1))};
}

void ValidateLocalJobOptions(const LocalJobOptions& options) {
  if (options.num_workers < 1) {
    throw InvalidArgument(
        fmt::format("-n/--num-workers is {}; a job needs at least 1 worker", options.num_workers));
  }
  if (options.min_workers < 0 || options.min_workers > options.num_workers) {
    throw InvalidArgument(
        fmt::format("--workers {}:{}: the minimum must be between 1 and the number of workers",
                    options.min_workers, options.num_workers));
  }
  if (options.rendezvous_in_worker && IsElastic(options.min_workers, options.num_workers)) {
    throw InvalidArgument(fmt::format(
        "--workers {}:{} needs a scheduler process (-s SERVERS): in a job whose worker 0 hosts "
        "the rendezvous, the others cannot go on without it",
        options.min_workers, options.num_workers));
  }
  if (options.rendezvous_in_worker && options.num_servers != 0) {
    throw InvalidArgument(fmt::format(
        "--no-scheduler starts a collectives-only job; -s/--num-servers must be 0, got {}",
        options.num_servers));
  }
  if (options.num_servers < 0) {
    throw InvalidArgument(
        fmt::format("-s/--num-servers is {}; it must be 0 or more", options.num_servers));
  }
  if (options.command.empty() || options.command[0].empty()) {
    throw InvalidArgument(
        "no command to run: give it after '--', e.g. tandem launch -n 2 -s 1 -- python3 train.py");
  }
  for (const auto& [name, value] : options.env) {
    if (!IsVariableName(name)) {
      throw InvalidArgument(fmt::format("--env: '{}' is not a variable name", name));
    }
  }
  if (options.job_id.size() > net::kMaxJobIdBytes) {
    throw InvalidArgument(fmt::format("--job-id is {} bytes long; the limit is {}",
                                      options.job_id.size(), net::kMaxJobIdBytes));
  }
  ValidateRestartOptions(options.restarts);
}

std::vector<ProcessSpec> BuildLocalJob(const LocalJobOptions& options,
                                       const LocalJobIdentity& identity,
                                       const std::map<std::string, std::string>& launcher_env) {
  std::vector<ProcessSpec> specs;
  specs.reserve(1 + options.num_servers + options.num_workers);
  if (!options.rendezvous_in_worker) {
    specs.push_back({"scheduler", BuiltInRole(options, "scheduler"),
                     RoleEnvironment(options, identity, launcher_env, "scheduler", 0), std::nullopt,
                     /*service=*/true});
  }
  for (int i = 0; i < options.num_servers; ++i) {
    specs.push_back({fmt::format("server {}", i), BuiltInRole(options, "server"),
                     RoleEnvironment(options, identity, launcher_env, "server", i), std::nullopt,
                     /*service=*/true});
  }
  for (int i = 0; i < options.num_workers; ++i) {
    specs.push_back({fmt::format("worker {}", i), options.command,
                     RoleEnvironment(options, identity, launcher_env, "worker", i)});
  }
  return specs;
}

uint16_t PickFreeLoopbackPort() {
  base::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw IoError(fmt::format("socket(AF_INET) failed: {}", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    throw IoError(fmt::format("cannot find a free port: bind to {}:0 failed: {}", kLoopback,
                              std::strerror(errno)));
  }
  socklen_t len = sizeof(addr);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw IoError(
        fmt::format("cannot find a free port: getsockname failed: {}", std::strerror(errno)));
  }
  return ntohs(addr.sin_port);
}

std::string CurrentExecutablePath() {
  char path[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n < 0) {
    throw IoError(fmt::format("cannot find the tandem binary: readlink(/proc/self/exe) failed: {}",
                              std::strerror(errno)));
  }
  return std::string(path, static_cast<size_t>(n));
}

int RunLocalJob(const LocalJobOptions& options, const SupervisorOptions& supervisor_options,
                const base::Environment& launcher_env) {
  ValidateLocalJobOptions(options);
  LocalJobOptions resolved = options;
  if (resolved.tandem_binary.empty() && !resolved.command_runs_all_roles) {
    resolved.tandem_binary = CurrentExecutablePath();
  }
  if (resolved.job_id.empty()) resolved.job_id = GenerateJobId();

  auto attempt = [&](ProcessSupervisor& supervisor, const std::map<std::string, std::string>& env) {
    // Below the ephemeral ports: a port the kernel hands out for outgoing
    // connections can be taken (even by a node's own retried connect to the
    // scheduler, a TCP self-connect) before the scheduler binds it.
    LocalJobIdentity identity = NewJobIdentity(resolved.job_id, RandomSchedulerPort());
    identity.master_port = MasterPortBeside(identity.scheduler_port, RandomSchedulerPort);
    std::vector<ProcessSpec> specs = BuildLocalJob(resolved, identity, env);
    // A misspelt program fails here, before any process of the job exists.
    for (const auto& spec : specs) FindExecutable(spec.argv[0], spec.env);

    OutputSink(supervisor_options.stderr_fd)
        .WriteLine(fmt::format("[launcher] job {}: scheduler at {}:{}{}, {} server{}, {}\n",
                               identity.job_id, kLoopback, identity.scheduler_port,
                               options.rendezvous_in_worker ? " (in worker 0)" : "",
                               options.num_servers, options.num_servers == 1 ? "" : "s",
                               DescribeWorkerCount(options.num_workers, options.min_workers,
                                                   supervisor.max_replacements())));
    std::vector<pid_t> pids;
    for (const auto& spec : specs) pids.push_back(supervisor.Start(spec));
    JobOutcome outcome = supervisor.Run();
    MergeJobTimeline(specs, pids, OutputSink(supervisor_options.stderr_fd));
    return outcome;
  };
  return RunWithRestarts(options.restarts, supervisor_options, launcher_env, attempt);
}

void MergeJobTimeline(const std::vector<ProcessSpec>& specs, const std::vector<pid_t>& pids,
                      OutputSink sink) {
  if (specs.empty()) return;
  auto it = specs.front().env.find("TANDEM_TIMELINE");
  if (it == specs.front().env.end() || it->second.empty()) return;
  const std::string& path = it->second;
  std::vector<LabelledTimeline> inputs;
  std::vector<std::string> missing;
  for (size_t i = 0; i < pids.size() && i < specs.size(); ++i) {
    std::string file = fmt::format("{}.{}", path, pids[i]);
    if (::access(file.c_str(), R_OK) == 0) {
      inputs.push_back({specs[i].label, std::move(file)});
    } else {
      missing.push_back(specs[i].label);
    }
  }
  if (!inputs.empty()) MergeTimelineFiles(path, inputs, missing, sink);
}

}  // namespace tandem::launch
