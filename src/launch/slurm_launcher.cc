// docs/launch.md, "Through Slurm: --launcher slurm".
#include "launch/slurm_launcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "launch/job_credentials.h"
#include "launch/rank_exec.h"
#include "launch/rank_timeline.h"
#include "tandem/error.h"

namespace tandem::launch {

ProcessSpec BuildSrunCommand(const SlurmJobOptions& options, const LocalJobIdentity& identity,
                             const std::map<std::string, std::string>& launcher_env) {
  const LocalJobOptions& job = options.job;
  ProcessSpec spec;
  spec.label = "srun";
  spec.prefix_output = false;  // every task prefixes its own lines
  // One SIGINT only makes srun print its tasks' states, SIGTERM makes it
  // kill the tasks at once; two SIGINTs make it pass SIGINT on to every
  // task (rank-exec ends its process) and wait for them.
  spec.stop_with_two_sigints = true;
  spec.env = launcher_env;
  spec.env["TANDEM_SECRET"] = identity.secret;
  spec.env["TANDEM_JOB_ID"] = identity.job_id;
  spec.env["DMLC_PS_ROOT_PORT"] = std::to_string(identity.scheduler_port);
  spec.env["TANDEM_MASTER_PORT"] = std::to_string(identity.master_port);  // rank-exec's
  // Task 0's node is the scheduler's host; rank-exec finds it in the step's
  // node list.
  for (const char* stale :
       {"DMLC_PS_ROOT_URI", "DMLC_NODE_HOST", "DMLC_WORKER_ID", "DMLC_SERVER_ID"}) {
    spec.env.erase(stale);
  }
  spec.argv = {options.srun, fmt::format("--ntasks={}", ProcessCount(job)),
               // A failed task does not kill the others at once: they notice
               // the loss and say so, within the grace period.
               "--kill-on-bad-exit=0", fmt::format("--wait={}", std::max(1, options.grace_seconds)),
               // tandem's scheduler and servers take tasks beside the workers.
               "--overcommit", "--export=ALL", fmt::format("--job-name={}", identity.job_id)};
  spec.argv.insert(spec.argv.end(), options.srun_args.begin(), options.srun_args.end());
  const std::vector<std::string> program = RankExecArgv(job, /*loopback=*/false);
  spec.argv.insert(spec.argv.end(), program.begin(), program.end());
  return spec;
}

int RunSlurmJob(const SlurmJobOptions& options, const SupervisorOptions& supervisor_options,
                const base::Environment& launcher_env) {
  ValidateLocalJobOptions(options.job);
  SlurmJobOptions o = options;
  o.grace_seconds = static_cast<int>(
      std::chrono::ceil<std::chrono::seconds>(supervisor_options.teardown_grace).count());
  if (o.job.tandem_binary.empty()) o.job.tandem_binary = CurrentExecutablePath();
  if (o.job.job_id.empty()) o.job.job_id = GenerateJobId();
  auto build = [&o](const std::map<std::string, std::string>& env) {
    LocalJobIdentity identity = NewJobIdentity(
        o.job.job_id, o.scheduler_port != 0 ? o.scheduler_port : RandomSchedulerPort());
    identity.master_port = MasterPortBeside(identity.scheduler_port, RandomSchedulerPort);
    RankLaunch launch{BuildSrunCommand(o, identity, env), {}};
    launch.announcement = fmt::format(
        "job {}: {} tasks through {} (scheduler on the first node, port {}{}), {} server{}, {} "
        "worker{}",
        identity.job_id, ProcessCount(o.job), o.srun, identity.scheduler_port,
        o.job.rendezvous_in_worker ? ", in worker 0" : "", o.job.num_servers,
        o.job.num_servers == 1 ? "" : "s", o.job.num_workers, o.job.num_workers == 1 ? "" : "s");
    launch.ranks = BuildLocalJob(o.job, identity, env);
    return launch;
  };
  return RunRankLauncher(build, o.job.restarts, supervisor_options, launcher_env);
}

}  // namespace tandem::launch
