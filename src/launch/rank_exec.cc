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
#include "launch/worker_variables.h"
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

int ParsedCount(const std::map<std::string, std::string>& env, const char* name) {
  const std::string* text = Get(env, name);
  if (text == nullptr) return 0;
  try {
    return std::stoi(*text);
  } catch (const std::exception&) {
    throw ConfigError(fmt::format("tandem rank-exec: {}='{}' is not a number", name, *text));
  }
}

// How many of the job's processes each host holds, in host order, when the
// rank's launcher says (srun's tasks per node; mpirun's local size, the same
// on every host under its by-slot mapping); empty when it does not.
std::vector<int> ProcessesPerHost(const std::map<std::string, std::string>& env, int size) {
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if (const std::string* text = Get(env, name)) return cluster::ExpandSlurmTasksPerNode(*text);
  }
  if (const int local = ParsedCount(env, "OMPI_COMM_WORLD_LOCAL_SIZE"); local > 0) {
    return std::vector<int>(static_cast<size_t>((size + local - 1) / local), local);
  }
  return {};
}

// The name of host `h` of the step, when Slurm lists them.
std::string SlurmHostName(const std::map<std::string, std::string>& env, size_t h) {
  for (const char* list : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}) {
    if (const std::string* nodes = Get(env, list)) {
      std::vector<std::string> hosts = cluster::ExpandSlurmHostlist(*nodes);
      return h < hosts.size() ? hosts[h] : std::string();
    }
  }
  return {};
}

// Rewrites the torchrun/Horovod variables of worker process `spec` (process
// `index` of `size`) for where the ranks' launcher put the processes.
void PlaceRankWorker(ProcessSpec& spec, const RankProcessOptions& options,
                     const std::map<std::string, std::string>& env, int index, int size,
                     const std::string& scheduler_host, uint16_t master_port) {
  if (options.loopback) return;  // every rank on this host: BuildLocalJob's placement holds
  const size_t first_worker = static_cast<size_t>(size - options.job.num_workers);
  const std::vector<int> per_host = ProcessesPerHost(env, size);
  if (per_host.empty()) {
    // Which ranks share a host is unknown: say nothing rather than guess.
    for (const char* name : {"LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                             "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "MASTER_ADDR"}) {
      spec.env.erase(name);
    }
    return;
  }
  const std::vector<size_t> hosts = ContiguousHosts(per_host, static_cast<size_t>(size));
  const std::vector<WorkerPlacement> workers = PlaceWorkers(hosts, first_worker);
  std::string master = SlurmHostName(env, hosts[first_worker]);
  if (master.empty() && hosts[first_worker] == hosts[0]) master = scheduler_host;
  for (auto& [name, value] :
       WorkerVariables(workers[static_cast<size_t>(index) - first_worker], master, master_port)) {
    spec.env[name] = value;
  }
  if (master.empty()) spec.env.erase("MASTER_ADDR");
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
  if (const int master = ParsedCount(env, "TANDEM_MASTER_PORT"); master > 0 && master <= 65535) {
    identity.master_port = static_cast<uint16_t>(master);
  }
  identity.secret = Required(env, "TANDEM_SECRET");
  identity.job_id = Required(env, "TANDEM_JOB_ID");
  const std::string scheduler_host = SchedulerHost(env);

  std::map<std::string, std::string> own;
  for (const auto& [name, value] : env) {
    if (!MpiVariable(name) && name != "TANDEM_MASTER_PORT") own[name] = value;
  }
  std::vector<ProcessSpec> specs = BuildLocalJob(options.job, identity, own);
  ProcessSpec spec = std::move(specs[static_cast<size_t>(r.rank)]);
  spec.env["DMLC_PS_ROOT_URI"] = scheduler_host;
  if (!options.loopback) spec.env.erase("DMLC_NODE_HOST");  // the route to the scheduler decides
  if (r.rank >= r.size - options.job.num_workers) {
    PlaceRankWorker(spec, options, env, r.rank, r.size, scheduler_host, identity.master_port);
  }
  for (const auto& [name, value] : options.job.env) spec.env[name] = value;  // --env wins
  return spec;
}

}  // namespace tandem::launch
