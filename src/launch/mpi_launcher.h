// `tandem launch --launcher mpi`: a job started by Open MPI's mpirun, which
// places the processes (on this host, or on the hosts of a hostfile) and
// tears them all down when one fails.
//
// The launcher runs one process, mpirun, under its ProcessSupervisor (so
// Ctrl-C, a kill of the launcher and the exit code behave as for the other
// launchers). mpirun starts `tandem mpi-exec` as every rank; each reads its
// MPI rank and becomes process `rank` of the local launcher's order
// (BuildLocalJob): rank 0 the scheduler, ranks 1..S the servers, then the
// workers (with --no-scheduler, ranks are the workers). mpi-exec supervises
// its process as the local launcher would, prefixing its output with its
// label, and exits with its status, which mpirun turns into the job's fate.
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
  uint16_t scheduler_port = 0;        ///< 0: a free loopback port, or random with hosts
};

/// The mpirun process of the job: argv (mpirun, its options, `-x` for each
/// forwarded variable, then `TANDEM mpi-exec ... -- COMMAND...`) and its
/// environment (`launcher_env` plus the job's variables that `-x`
/// forwards). Requires options valid and job.tandem_binary set. Pure.
ProcessSpec BuildMpirunCommand(const MpiJobOptions& options, const LocalJobIdentity& identity,
                               const std::map<std::string, std::string>& launcher_env);

/// Runs the job through mpirun and returns the launcher's exit code.
/// Throws InvalidArgument for bad options, IoError as RunLocalJob does.
int RunMpiJob(const MpiJobOptions& options, const SupervisorOptions& supervisor_options,
              const base::Environment& launcher_env);

/// What `tandem mpi-exec` is told on its command line. Thread-safety: a
/// value type.
struct MpiRankOptions {
  LocalJobOptions job;       ///< as the launcher's, tandem_binary resolved
  bool loopback = false;     ///< every rank on this host: DMLC_NODE_HOST=127.0.0.1
};

/// This rank's process: reads the MPI rank and size (OMPI_COMM_WORLD_RANK
/// and _SIZE, else PMIX_RANK with OMPI_COMM_WORLD_SIZE, else PMI_RANK and
/// PMI_SIZE) from `env`, checks the size against the job's process count,
/// and returns process `rank` of BuildLocalJob with the scheduler address,
/// secret and job id from `env` (DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT,
/// TANDEM_SECRET, TANDEM_JOB_ID) and, unless loopback, DMLC_NODE_HOST left
/// for the node to find. Throws ConfigError naming what is missing or
/// inconsistent. Pure.
ProcessSpec MpiRankProcess(const MpiRankOptions& options,
                           const std::map<std::string, std::string>& env);

}  // namespace tandem::launch
