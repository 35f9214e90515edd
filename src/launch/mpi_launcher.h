// `tandem launch --launcher mpi`: a job started by Open MPI's mpirun, which
// places the processes (on this host, or on the hosts of a hostfile) and
// tears them all down when one fails.
//
// The launcher runs one process, mpirun, under its ProcessSupervisor (so
// Ctrl-C, a kill of the launcher and the exit code behave as for the other
// launchers). mpirun starts `tandem rank-exec` as every rank
// (launch/rank_exec.h), which becomes the job's process of its MPI rank and
// exits with its status, which mpirun turns into the job's fate.
// The job's secret reaches the ranks through mpirun's environment
// forwarding (`-x NAME`), never on a command line. docs/launch.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/environment.h"
#include "launch/child_process.h"
#include "launch/hostfile.h"
#include "launch/local_launcher.h"
#include "launch/process_supervisor.h"

namespace tandem::launch {

/// What the user asked for. Thread-safety: a value type.
struct MpiJobOptions {
  LocalJobOptions job;                ///< counts, command, --env, job id, roles
  std::vector<HostSlots> hosts;       ///< -H; empty: every rank on this host
  std::string mpirun = "mpirun";      ///< TANDEM_MPIRUN or the default
  std::vector<std::string> mpi_args;  ///< --mpi-arg, before the program
  uint16_t scheduler_port = 0;        ///< 0: random below the ephemeral ports
};

/// The mpirun process of the job: argv (mpirun, its options, `-x` for each
/// forwarded variable, then `TANDEM rank-exec ... -- COMMAND...`) and its
/// environment (`launcher_env` plus the job's variables that `-x`
/// forwards). Requires options valid and job.tandem_binary set. Pure.
ProcessSpec BuildMpirunCommand(const MpiJobOptions& options, const LocalJobIdentity& identity,
                               const std::map<std::string, std::string>& launcher_env);

/// Runs the job through mpirun and returns the launcher's exit code.
/// Throws InvalidArgument for bad options, IoError as RunLocalJob does.
int RunMpiJob(const MpiJobOptions& options, const SupervisorOptions& supervisor_options,
              const base::Environment& launcher_env);

}  // namespace tandem::launch
