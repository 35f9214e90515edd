// `tandem rank-exec`: one process of a job whose processes another launcher
// started as ranks, mpirun (`tandem launch --launcher mpi`) or srun
// (`--launcher slurm`). Each rank becomes process `rank` of the local
// launcher's order (BuildLocalJob): rank 0 the scheduler, ranks 1..S the
// servers, then the workers (with --no-scheduler, every rank is a worker),
// and supervises it as the local launcher would (output prefixed with its
// label, its process group torn down with it), exiting with its status.
// docs/launch.md.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/environment.h"
#include "launch/child_process.h"
#include "launch/local_launcher.h"
#include "launch/process_supervisor.h"

namespace tandem::launch {

/// What `tandem rank-exec` is told on its command line. Thread-safety: a
/// value type.
struct RankProcessOptions {
  LocalJobOptions job;    ///< as the launcher's, tandem_binary resolved
  bool loopback = false;  ///< every rank on this host: DMLC_NODE_HOST=127.0.0.1
};

/// The processes of a job: a scheduler unless rendezvous_in_worker, the
/// servers and the workers. Pure.
int ProcessCount(const LocalJobOptions& job);

/// The command line every rank runs: `TANDEM rank-exec --servers S
/// --workers W [--command-runs-all-roles] [--no-scheduler] [--loopback]
/// [--env NAME=VALUE]... -- COMMAND...`, the job's own options and command
/// passed through untouched. Requires job.tandem_binary set. Pure.
std::vector<std::string> RankExecArgv(const LocalJobOptions& job, bool loopback);

/// What one attempt of an mpirun or srun job starts: the process that
/// starts the ranks, the line that announces it, and the ranks it starts.
/// Thread-safety: a value type.
struct RankLaunch {
  ProcessSpec launcher;      ///< mpirun or srun, with the attempt's identity
  std::string announcement;  ///< "job ...: scheduler at ..."
  /// The job's processes (BuildLocalJob with the attempt's identity and
  /// environment): their labels and TANDEM_TIMELINE say which rank
  /// timelines to merge after the attempt (MergeRankTimelines).
  std::vector<ProcessSpec> ranks;
};

/// Runs the job's attempts (RunWithRestarts with `restarts`): for each,
/// `build` makes the launcher process (mpirun or srun, which starts the
/// ranks) from the attempt's environment (AttemptEnvironment) with a fresh
/// identity; its program is checked to exist before anything starts,
/// "[launcher] <announcement>" is written, and it runs as the attempt's only
/// supervised process, relaying its ranks' failure reports
/// (ProcessSpec::relays_rank_exec): the attempt's failure, and so the
/// restart decision, is the first failed rank's as its rank-exec reported
/// it, with the rank's status. Orphans of ranks that mpirun killed before
/// their rank-exec could reap them are ended and reaped
/// (SupervisorOptions::end_adopted_orphans). After each attempt the ranks'
/// timelines are merged (MergeRankTimelines), so the merged timeline is
/// the last attempt's. Returns the exit code RunWithRestarts returns: the
/// first failed rank's, else the launcher's. Throws what `build`,
/// FindExecutable, RunWithRestarts and ProcessSupervisor throw.
int RunRankLauncher(
    const std::function<RankLaunch(const std::map<std::string, std::string>& env)>& build,
    const RestartOptions& restarts, const SupervisorOptions& supervisor_options,
    const base::Environment& launcher_env);

/// The name of the host a rank runs on, for the reports of its end:
/// SLURMD_NODENAME of `env` (under srun, Slurm's name of the node), else
/// gethostname(). Any thread.
std::string RankHostName(const std::map<std::string, std::string>& env);

/// Makes this process (rank-exec) get SIGTERM when the thread that
/// started it dies (PR_SET_PDEATHSIG): its parent is mpirun, Open MPI's
/// orted or srun's slurmstepd, and when that one is killed with SIGKILL
/// (with the launcher above it) nobody else would stop the rank; the
/// SIGTERM makes the supervisor end the rank's process. Throws IoError
/// when the parent is gone already. Call before the supervisor exists.
void StopWithParent();

/// This rank's process. The rank and world size come from `env`:
/// OMPI_COMM_WORLD_RANK and _SIZE (mpirun), else PMIX_RANK or PMI_RANK
/// with PMI_SIZE, else SLURM_PROCID and SLURM_NTASKS (srun); the size must
/// equal ProcessCount. The scheduler's address is DMLC_PS_ROOT_URI, else
/// (under srun) the first host of SLURM_STEP_NODELIST or
/// SLURM_JOB_NODELIST, where srun puts task 0; DMLC_PS_ROOT_PORT,
/// TANDEM_SECRET and TANDEM_JOB_ID must be set. Unless loopback,
/// DMLC_NODE_HOST is left for the node to find. The MPI launcher's own
/// variables (OMPI_*, PMIX_*, PMI_*) are not passed on: the process's
/// start-up contract is tandem's. Throws ConfigError naming what is missing
/// or inconsistent. Pure.
ProcessSpec RankProcess(const RankProcessOptions& options,
                        const std::map<std::string, std::string>& env);

}  // namespace tandem::launch
