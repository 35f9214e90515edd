// docs/launch.md, "Through Open MPI: --launcher mpi".
#include "launch/mpi_launcher.h"

#include <fmt/format.h>
#include <unistd.h>

#include <string_view>

#include "launch/job_credentials.h"
#include "launch/rank_exec.h"
#include "launch/rank_timeline.h"
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

std::string HostList(const std::vector<HostSlots>& hosts) {
  std::string list;
  for (const auto& h : hosts) {
    if (!list.empty()) list += ",";
    list += fmt::format("{}:{}", h.login, h.slots);
  }
  return list;
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
  spec.env["TANDEM_MASTER_PORT"] = std::to_string(identity.master_port);  // rank-exec's
  spec.env.erase("DMLC_NODE_HOST");
  spec.env.erase("DMLC_WORKER_ID");
  spec.env.erase("DMLC_SERVER_ID");

  spec.argv = {options.mpirun};
  if (::geteuid() == 0) spec.argv.push_back("--allow-run-as-root");
  // tandem's scheduler and servers take ranks beside the workers.
  spec.argv.push_back("--oversubscribe");
  spec.argv.insert(spec.argv.end(), {"-np", std::to_string(ProcessCount(job))});
  if (!options.hosts.empty())
    spec.argv.insert(spec.argv.end(), {"--host", HostList(options.hosts)});
  for (const auto& [name, value] : spec.env) {
    if (Forwarded(name)) spec.argv.insert(spec.argv.end(), {"-x", name});
  }
  spec.argv.insert(spec.argv.end(), options.mpi_args.begin(), options.mpi_args.end());
  const std::vector<std::string> program = RankExecArgv(job, options.hosts.empty());
  spec.argv.insert(spec.argv.end(), program.begin(), program.end());
  return spec;
}

int RunMpiJob(const MpiJobOptions& options, const SupervisorOptions& supervisor_options,
              const base::Environment& launcher_env) {
  ValidateLocalJobOptions(options.job);
  MpiJobOptions o = options;
  if (o.job.tandem_binary.empty()) o.job.tandem_binary = CurrentExecutablePath();
  if (o.job.job_id.empty()) o.job.job_id = GenerateJobId();
  auto build = [&o](const std::map<std::string, std::string>& env) {
    // Below the ephemeral ports, on this host or not (RandomSchedulerPort).
    const uint16_t port = o.scheduler_port != 0 ? o.scheduler_port : RandomSchedulerPort();
    LocalJobIdentity identity = NewJobIdentity(o.job.job_id, port);
    identity.master_port = MasterPortBeside(port, RandomSchedulerPort);
    RankLaunch launch{BuildMpirunCommand(o, identity, env), {}};
    launch.announcement = fmt::format(
        "job {}: scheduler at {}:{}{} through {}, {} server{}, {} worker{}{}", identity.job_id,
        launch.launcher.env["DMLC_PS_ROOT_URI"], identity.scheduler_port,
        o.job.rendezvous_in_worker ? " (in worker 0)" : "", o.mpirun, o.job.num_servers,
        o.job.num_servers == 1 ? "" : "s", o.job.num_workers, o.job.num_workers == 1 ? "" : "s",
        o.hosts.empty() ? " on this host" : fmt::format(" on {} hosts", o.hosts.size()));
    launch.ranks = BuildLocalJob(o.job, identity, env);
    return launch;
  };
  return RunRankLauncher(build, o.job.restarts, supervisor_options, launcher_env);
}

}  // namespace tandem::launch
