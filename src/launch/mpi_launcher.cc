// docs/launch.md, "Through Open MPI: --launcher mpi".
#include "launch/mpi_launcher.h"

#include <fmt/format.h>
#include <unistd.h>

#include <random>
#include <string_view>

#include "launch/job_credentials.h"
#include "tandem/error.h"

namespace tandem::launch {
namespace {

constexpr const char* kLoopback = "127.0.0.1";

// Variables of the launcher's environment that every rank gets, as the ssh
// launcher forwards them.
bool Forwarded(std::string_view name) {
  for (std::string_view prefix : {"DMLC_", "PS_", "MXNET_", "TANDEM_", "HOROVOD_"}) {
    if (name.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

// The MPI launcher's variables: a rank's process must not take them for its
// own start-up contract (it is not the MPI program; tandem's DMLC contract
// says who it is).
bool MpiVariable(std::string_view name) {
  for (std::string_view prefix : {"OMPI_", "PMIX_", "PMI_"}) {
    if (name.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

int ProcessCount(const LocalJobOptions& job) {
  return (job.rendezvous_in_worker ? 0 : 1) + job.num_servers + job.num_workers;
}

std::string HostList(const std::vector<HostSlots>& hosts) {
  std::string list;
  for (const auto& h : hosts) {
    if (!list.empty()) list += ",";
    list += fmt::format("{}:{}", h.login, h.slots);
  }
  return list;
}

const std::string& Required(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) {
    throw ConfigError(fmt::format(
        "tandem mpi-exec: {} is not set (mpi-exec runs as a rank of `tandem launch --launcher "
        "mpi`, which forwards it with mpirun -x)",
        name));
  }
  return it->second;
}

}  // namespace

ProcessSpec BuildMpirunCommand(const MpiJobOptions& options, const LocalJobIdentity& identity,
                               const std::map<std::string, std::string>& launcher_env) {
  const LocalJobOptions& job = options.job;
  const std::string scheduler_host = options.hosts.empty() ? kLoopback : options.hosts[0].host;
  ProcessSpec spec;
  spec.label = "mpirun";
  spec.prefix_output = false;  // every rank prefixes its own lines
  spec.env = launcher_env;
  spec.env["TANDEM_SECRET"] = identity.secret;
  spec.env["TANDEM_JOB_ID"] = identity.job_id;
  spec.env["DMLC_PS_ROOT_URI"] = scheduler_host;
  spec.env["DMLC_PS_ROOT_PORT"] = std::to_string(identity.scheduler_port);
  spec.env.erase("DMLC_NODE_HOST");
  spec.env.erase("DMLC_WORKER_ID");
  spec.env.erase("DMLC_SERVER_ID");

  spec.argv = {options.mpirun};
  if (::geteuid() == 0) spec.argv.push_back("--allow-run-as-root");
  // tandem's scheduler and servers take ranks beside the workers.
  spec.argv.push_back("--oversubscribe");
  spec.argv.insert(spec.argv.end(), {"-np", std::to_string(ProcessCount(job))});
  if (!options.hosts.empty()) spec.argv.insert(spec.argv.end(), {"--host", HostList(options.hosts)});
  for (const auto& [name, value] : spec.env) {
    if (Forwarded(name)) spec.argv.insert(spec.argv.end(), {"-x", name});
  }
  spec.argv.insert(spec.argv.end(), options.mpi_args.begin(), options.mpi_args.end());
  spec.argv.insert(spec.argv.end(),
                   {job.tandem_binary, "mpi-exec", "--servers", std::to_string(job.num_servers),
                    "--workers", std::to_string(job.num_workers)});
  if (job.command_runs_all_roles) spec.argv.push_back("--command-runs-all-roles");
  if (job.rendezvous_in_worker) spec.argv.push_back("--no-scheduler");
  if (options.hosts.empty()) spec.argv.push_back("--loopback");
  for (const auto& [name, value] : job.env) {
    spec.argv.insert(spec.argv.end(), {"--env", name + "=" + value});
  }
  spec.argv.push_back("--");
  spec.argv.insert(spec.argv.end(), job.command.begin(), job.command.end());
  return spec;
}

int RunMpiJob(const MpiJobOptions& options, const SupervisorOptions& supervisor_options,
              const base::Environment& launcher_env) {
  ValidateLocalJobOptions(options.job);
  MpiJobOptions o = options;
  if (o.job.tandem_binary.empty()) o.job.tandem_binary = CurrentExecutablePath();
  LocalJobIdentity identity;
  if (o.scheduler_port != 0) {
    identity.scheduler_port = o.scheduler_port;
  } else if (o.hosts.empty()) {
    identity.scheduler_port = PickFreeLoopbackPort();
  } else {
    std::random_device rd;
    identity.scheduler_port = static_cast<uint16_t>(20000 + rd() % 40000);
  }
  identity.secret = GenerateJobSecret();
  identity.job_id = o.job.job_id.empty() ? GenerateJobId() : o.job.job_id;

  ProcessSpec mpirun = BuildMpirunCommand(o, identity, launcher_env.vars());
  FindExecutable(mpirun.argv[0], mpirun.env);  // "mpirun not found" before anything starts
  ProcessSupervisor supervisor(supervisor_options);
  OutputSink(supervisor_options.stderr_fd)
      .WriteLine(fmt::format(
          "[launcher] job {}: scheduler at {}:{}{} through {}, {} server{}, {} worker{}{}\n",
          identity.job_id, mpirun.env["DMLC_PS_ROOT_URI"], identity.scheduler_port,
          o.job.rendezvous_in_worker ? " (in worker 0)" : "", o.mpirun, o.job.num_servers,
          o.job.num_servers == 1 ? "" : "s", o.job.num_workers, o.job.num_workers == 1 ? "" : "s",
          o.hosts.empty() ? " on this host" : fmt::format(" on {} hosts", o.hosts.size())));
  supervisor.Start(mpirun);
  return supervisor.Run().exit_code;
}

ProcessSpec MpiRankProcess(const MpiRankOptions& options,
                           const std::map<std::string, std::string>& env) {
  ValidateLocalJobOptions(options.job);
  auto get = [&](const char* name) -> const std::string* {
    auto it = env.find(name);
    return it == env.end() || it->second.empty() ? nullptr : &it->second;
  };
  const std::string* rank_text = get("OMPI_COMM_WORLD_RANK");
  const std::string* size_text = get("OMPI_COMM_WORLD_SIZE");
  if (rank_text == nullptr) rank_text = get("PMIX_RANK");
  if (rank_text == nullptr) rank_text = get("PMI_RANK");
  if (size_text == nullptr) size_text = get("PMI_SIZE");
  if (rank_text == nullptr || size_text == nullptr) {
    throw ConfigError(
        "tandem mpi-exec: no MPI rank or size in the environment (OMPI_COMM_WORLD_RANK/_SIZE, "
        "PMIX_RANK, PMI_RANK/PMI_SIZE): mpi-exec runs as a rank under mpirun");
  }
  int rank = -1, size = -1;
  try {
    rank = std::stoi(*rank_text);
    size = std::stoi(*size_text);
  } catch (const std::exception&) {
    throw ConfigError(fmt::format("tandem mpi-exec: MPI rank '{}' or size '{}' is not a number",
                                  *rank_text, *size_text));
  }
  const int expected = ProcessCount(options.job);
  if (size != expected || rank < 0 || rank >= size) {
    throw ConfigError(fmt::format(
        "tandem mpi-exec: MPI rank {} of {} processes, but the job has {} ({}{} server{} and {} "
        "worker{}): mpirun's -np must match",
        rank, size, expected, options.job.rendezvous_in_worker ? "" : "a scheduler, ",
        options.job.num_servers, options.job.num_servers == 1 ? "" : "s",
        options.job.num_workers, options.job.num_workers == 1 ? "" : "s"));
  }
  LocalJobIdentity identity;
  const std::string& port = Required(env, "DMLC_PS_ROOT_PORT");
  try {
    int p = std::stoi(port);
    if (p < 1 || p > 65535) throw std::out_of_range("port");
    identity.scheduler_port = static_cast<uint16_t>(p);
  } catch (const std::exception&) {
    throw ConfigError(fmt::format("tandem mpi-exec: DMLC_PS_ROOT_PORT='{}' is not a port", port));
  }
  identity.secret = Required(env, "TANDEM_SECRET");
  identity.job_id = Required(env, "TANDEM_JOB_ID");
  const std::string scheduler_host = Required(env, "DMLC_PS_ROOT_URI");

  std::map<std::string, std::string> own;
  for (const auto& [name, value] : env) {
    if (!MpiVariable(name)) own[name] = value;
  }
  std::vector<ProcessSpec> specs = BuildLocalJob(options.job, identity, own);
  ProcessSpec spec = std::move(specs[static_cast<size_t>(rank)]);
  spec.env["DMLC_PS_ROOT_URI"] = scheduler_host;
  if (!options.loopback) spec.env.erase("DMLC_NODE_HOST");  // the route to the scheduler decides
  for (const auto& [name, value] : options.job.env) spec.env[name] = value;  // --env wins
  return spec;
}

}  // namespace tandem::launch
