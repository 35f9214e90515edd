// docs/launch.md, "Through Open MPI" and "Through Slurm".
#include "launch/rank_exec.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "cluster/launch_contract.h"
#include "launch/job_restarts.h"
#include "launch/rank_timeline.h"
#include "tandem/error.h"

namespace tandem::launch {
namespace {

bool MpiVariable(std::string_view name) {
  for (std::string_view prefix : {"OMPI_", "PMIX_", "PMI_"}) {
    if (name.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

const std::string* Get(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

const std::string& Required(const std::map<std::string, std::string>& env, const char* name) {
  if (const std::string* value = Get(env, name)) return *value;
  throw ConfigError(fmt::format(
      "tandem rank-exec: {} is not set (rank-exec runs as a rank of `tandem launch --launcher "
      "mpi|slurm`, which sets it)",
      name));
}

// The rank and world size, and where they came from.
struct RankAndSize {
  int rank = -1;
  int size = -1;
  const char* source = "";
};

RankAndSize ReadRank(const std::map<std::string, std::string>& env) {
  const std::pair<const char*, const char*> sources[] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMIX_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMI_RANK", "PMI_SIZE"},
      {"SLURM_PROCID", "SLURM_NTASKS"},
  };
  for (const auto& [rank_name, size_name] : sources) {
    const std::string* rank = Get(env, rank_name);
    const std::string* size = Get(env, size_name);
    if (rank == nullptr || size == nullptr) continue;
    RankAndSize r;
    r.source = rank_name;
    try {
      r.rank = std::stoi(*rank);
      r.size = std::stoi(*size);
    } catch (const std::exception&) {
      throw ConfigError(fmt::format("tandem rank-exec: {}='{}' or {}='{}' is not a number",
                                    rank_name, *rank, size_name, *size));
    }
    return r;
  }
  throw ConfigError(
      "tandem rank-exec: no rank and size in the environment (OMPI_COMM_WORLD_RANK/_SIZE, "
      "PMIX_RANK, PMI_RANK/PMI_SIZE, SLURM_PROCID/SLURM_NTASKS): rank-exec runs as a rank "
      "under mpirun or srun");
}

std::string SchedulerHost(const std::map<std::string, std::string>& env) {
  if (const std::string* uri = Get(env, "DMLC_PS_ROOT_URI")) return *uri;
  for (const char* list : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}) {
    if (const std::string* nodes = Get(env, list)) {
      std::vector<std::string> hosts = cluster::ExpandSlurmHostlist(*nodes);
      if (!hosts.empty()) return hosts.front();
    }
  }
  return Required(env, "DMLC_PS_ROOT_URI");  // throws, naming it
}

}  // namespace

int ProcessCount(const LocalJobOptions& job) {
  return (job.rendezvous_in_worker ? 0 : 1) + job.num_servers + job.num_workers;
}

std::vector<std::string> RankExecArgv(const LocalJobOptions& job, bool loopback) {
  std::vector<std::string> argv = {job.tandem_binary, "rank-exec",
                                   "--servers",       std::to_string(job.num_servers),
                                   "--workers",       std::to_string(job.num_workers)};
  if (job.command_runs_all_roles) argv.push_back("--command-runs-all-roles");
  if (job.rendezvous_in_worker) argv.push_back("--no-scheduler");
  if (loopback) argv.push_back("--loopback");
  for (const auto& [name, value] : job.env) argv.insert(argv.end(), {"--env", name + "=" + value});
  argv.push_back("--");
  argv.insert(argv.end(), job.command.begin(), job.command.end());
  return argv;
}

int RunRankLauncher(
    const std::function<RankLaunch(const std::map<std::string, std::string>& env)>& build,
    const RestartOptions& restarts, const SupervisorOptions& supervisor_options,
    const base::Environment& launcher_env) {
  SupervisorOptions options = supervisor_options;
  options.end_adopted_orphans = true;
  auto attempt = [&](ProcessSupervisor& supervisor, const std::map<std::string, std::string>& env) {
    RankLaunch launch = build(env);
    // "mpirun not found" before anything starts
    FindExecutable(launch.launcher.argv[0], launch.launcher.env);
    launch.launcher.relays_rank_exec = true;
    OutputSink(options.stderr_fd).WriteLine("[launcher] " + launch.announcement + "\n");
    supervisor.Start(launch.launcher);
    JobOutcome outcome = supervisor.Run();
    MergeRankTimelines(launch.ranks, OutputSink(options.stderr_fd));
    return outcome;
  };
  return RunWithRestarts(restarts, options, launcher_env, attempt);
}

void StopWithParent() {
  const pid_t parent = ::getppid();
  if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) {
    throw IoError(
        fmt::format("tandem rank-exec: prctl(PR_SET_PDEATHSIG): {}", std::strerror(errno)));
  }
  // The parent may have died before the death signal was set.
  if (parent == 1 || ::getppid() != parent) {
    throw IoError(
        "tandem rank-exec: the launcher that started this rank (mpirun, orted, "
        "slurmstepd) is gone");
  }
}

std::string RankHostName(const std::map<std::string, std::string>& env) {
  if (const std::string* node = Get(env, "SLURMD_NODENAME")) return *node;
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

ProcessSpec RankProcess(const RankProcessOptions& options,
                        const std::map<std::string, std::string>& env) {
  ValidateLocalJobOptions(options.job);
  const RankAndSize r = ReadRank(env);
  const int expected = ProcessCount(options.job);
  if (r.size != expected || r.rank < 0 || r.rank >= r.size) {
    throw ConfigError(fmt::format(
        "tandem rank-exec: rank {} of {} processes ({}), but the job has {} ({}{} server{} and "
        "{} worker{}): the launcher's process count must match",
        r.rank, r.size, r.source, expected, options.job.rendezvous_in_worker ? "" : "a scheduler, ",
        options.job.num_servers, options.job.num_servers == 1 ? "" : "s", options.job.num_workers,
        options.job.num_workers == 1 ? "" : "s"));
  }
  LocalJobIdentity identity;
  const std::string& port = Required(env, "DMLC_PS_ROOT_PORT");
  try {
    int p = std::stoi(port);
    if (p < 1 || p > 65535) throw std::out_of_range("port");
    identity.scheduler_port = static_cast<uint16_t>(p);
  } catch (const std::exception&) {
    throw ConfigError(fmt::format("tandem rank-exec: DMLC_PS_ROOT_PORT='{}' is not a port", port));
  }
  identity.secret = Required(env, "TANDEM_SECRET");
  identity.job_id = Required(env, "TANDEM_JOB_ID");
  const std::string scheduler_host = SchedulerHost(env);

  std::map<std::string, std::string> own;
  for (const auto& [name, value] : env) {
    if (!MpiVariable(name)) own[name] = value;
  }
  std::vector<ProcessSpec> specs = BuildLocalJob(options.job, identity, own);
  ProcessSpec spec = std::move(specs[static_cast<size_t>(r.rank)]);
  spec.env["DMLC_PS_ROOT_URI"] = scheduler_host;
  if (!options.loopback) spec.env.erase("DMLC_NODE_HOST");  // the route to the scheduler decides
  for (const auto& [name, value] : options.job.env) spec.env[name] = value;  // --env wins
  return spec;
}

}  // namespace tandem::launch
