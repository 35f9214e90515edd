// `tandem launch --launcher slurm`: a job started by Slurm's srun, inside
// an allocation (salloc, sbatch) or asking for one itself. srun places the
// tasks; when one ends, the others get the grace period to end on their own
// (they fail with PeerLost, naming it) before srun kills them (--wait).
//
// The launcher runs one process, srun, under its ProcessSupervisor (Ctrl-C,
// a kill of the launcher and the exit code behave as for the other
// launchers). srun starts `tandem rank-exec` as every task
// (launch/rank_exec.h): task 0 the scheduler, then the servers, then the
// workers, the scheduler's host being the first node of the step, where
// srun puts task 0. The job's secret reaches the tasks in srun's
// environment (--export=ALL), never on a command line. docs/launch.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/environment.h"
#include "launch/child_process.h"
#include "launch/local_launcher.h"
#include "launch/process_supervisor.h"

namespace tandem::launch {

/// What the user asked for. Thread-safety: a value type.
struct SlurmJobOptions {
  LocalJobOptions job;                 ///< counts, command, --env, job id, roles
  std::string srun = "srun";           ///< TANDEM_SRUN or the default
  std::vector<std::string> srun_args;  ///< --srun-arg, before the program
  uint16_t scheduler_port = 0;  ///< 0: random below the ephemeral ports (RandomSchedulerPort)
  /// srun's --wait: after the first task ends, how long the others may take
  /// to end on their own before srun kills them (the local launcher's
  /// grace period; tandem's processes fail on their own with PeerLost).
  int grace_seconds = 10;
};

/// The srun process of the job: argv (srun, --ntasks, --kill-on-bad-exit=0
/// with --wait=grace_seconds, --overcommit, --export=ALL, the user's srun
/// arguments, then `TANDEM
/// rank-exec ... -- COMMAND...`) and its environment (`launcher_env` plus
/// the job's secret, id and scheduler port). Requires options valid and
/// job.tandem_binary set. Pure.
ProcessSpec BuildSrunCommand(const SlurmJobOptions& options, const LocalJobIdentity& identity,
                             const std::map<std::string, std::string>& launcher_env);

/// Runs the job through srun and returns the launcher's exit code. Throws
/// InvalidArgument for bad options, IoError as RunLocalJob does.
int RunSlurmJob(const SlurmJobOptions& options, const SupervisorOptions& supervisor_options,
                const base::Environment& launcher_env);

}  // namespace tandem::launch
