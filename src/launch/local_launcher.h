// `tandem launch --launcher local`: a whole job on this host, as MXNet's
// launch.py did in its local mode: one scheduler, S servers and W workers,
// all under one ProcessSupervisor.
//
// Each process gets the launcher's environment plus the DMLC contract
// (src/cluster/dmlc_contract.h) and the job's credentials; docs/launch.md
// has the table. The scheduler and the servers run this binary's built-in
// roles (`tandem scheduler`, `tandem server`) unless the command runs every
// role itself (--command-runs-all-roles).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/environment.h"
#include "launch/child_process.h"
#include "launch/prefixed_output.h"
#include "launch/process_supervisor.h"
#include "launch/restart_policy.h"

namespace tandem::launch {

/// What the user asked for. Thread-safety: a value type.
struct LocalJobOptions {
  int num_workers = 1;  ///< >= 1
  /// --workers MIN:MAX's MIN: with 1 <= min_workers < num_workers
  /// (IsElastic) every process gets TANDEM_MIN_WORKERS=min_workers and the
  /// scheduler lets a lost worker leave the job while min_workers remain;
  /// 0 or num_workers: every lost worker fails the job (and an inherited
  /// TANDEM_MIN_WORKERS is removed). Elastic requires a scheduler process
  /// (not rendezvous_in_worker).
  int min_workers = 0;
  int num_servers = 0;  ///< >= 0
  /// The workers' program and arguments (and every role's, with
  /// command_runs_all_roles). Must not be empty.
  std::vector<std::string> command;
  /// --env K=V in the order given; they override everything else, a later
  /// one overriding an earlier one of the same name.
  std::vector<std::pair<std::string, std::string>> env;
  /// TANDEM_JOB_ID; empty: a fresh one (GenerateJobId).
  std::string job_id;
  /// The scheduler and servers run `command` too (the program hands those
  /// roles to tandem, e.g. with tandem::ServeAssignedRole()).
  bool command_runs_all_roles = false;
  /// Collectives-only job (--no-scheduler): start only the workers; worker 0
  /// hosts the rendezvous (the scheduler service) in-process at the
  /// scheduler address every worker is given. Requires num_servers == 0.
  bool rendezvous_in_worker = false;
  /// The binary whose `scheduler` and `server` subcommands run those roles;
  /// empty: this process's own executable (CurrentExecutablePath).
  std::string tandem_binary;
  /// --max-restarts, --restart-delay, --restart-policy: whole-job restarts
  /// (job_restarts.h). Every launcher honours them.
  RestartOptions restarts;
};

/// Per-job values the launcher chooses before starting anything.
/// Thread-safety: a value type.
struct LocalJobIdentity {
  uint16_t scheduler_port = 0;  ///< DMLC_PS_ROOT_PORT
  std::string secret;           ///< TANDEM_SECRET
  std::string job_id;           ///< TANDEM_JOB_ID
  /// MASTER_PORT of the workers (torch.distributed's store, on worker 0's
  /// host); 0: not set.
  uint16_t master_port = 0;
};

/// The job's identity: the scheduler at `scheduler_port`, a fresh secret,
/// and `job_id` or, when empty, a fresh one (GenerateJobId). Any thread.
LocalJobIdentity NewJobIdentity(const std::string& job_id, uint16_t scheduler_port);

/// A second port for torch.distributed's store (MASTER_PORT): `draw()`
/// again until it differs from `scheduler_port`. Any thread.
uint16_t MasterPortBeside(uint16_t scheduler_port, const std::function<uint16_t()>& draw);

/// This host's ephemeral (outgoing) port range, from
/// /proc/sys/net/ipv4/ip_local_port_range; Linux's default 32768..60999 when
/// unreadable. Any thread.
std::pair<int, int> EphemeralPortRange();

/// Where RandomSchedulerPort draws from, given the ephemeral range: the wider
/// stretch of 10000..65535 outside it (10000..32767 with Linux's default), so
/// that no outgoing connection holds the port. Any thread.
std::pair<int, int> SchedulerPortRange(std::pair<int, int> ephemeral);

/// A port for a scheduler on a host the launcher cannot probe (ssh, mpirun,
/// srun): random in SchedulerPortRange(EphemeralPortRange()), skipping ports
/// that something on this host holds (the first node is often this host).
/// Any thread.
uint16_t RandomSchedulerPort();

/// A random port in `range` (inclusive) that this host could bind on all
/// addresses a moment ago; after 64 draws that were all busy, the last one.
/// Any thread.
uint16_t RandomPortFreeHere(std::pair<int, int> range);

/// Parses one --env argument: "NAME=VALUE" (split at the first '='), or
/// launch.py's "NAME:VALUE" when there is no '='. The value may be empty
/// and may contain anything. Throws InvalidArgument quoting the argument
/// when there is no separator or NAME is not [A-Za-z_][A-Za-z0-9_]*. Any thread.
std::pair<std::string, std::string> ParseEnvAssignment(std::string_view text);

/// Throws InvalidArgument, naming the option, for a worker count below 1, a
/// min_workers outside 0..num_workers or elastic with rendezvous_in_worker, a
/// server count below 0, servers with rendezvous_in_worker, an empty command, an --env name that
/// ParseEnvAssignment would refuse, a job id longer than the handshake
/// allows, or invalid restart options (ValidateRestartOptions). Any thread.
void ValidateLocalJobOptions(const LocalJobOptions& options);

/// The processes of the job in start order: the scheduler, servers 0..S-1,
/// workers 0..W-1, labelled "scheduler", "server <i>", "worker <i>"; with
/// rendezvous_in_worker only the workers, each also given
/// TANDEM_RENDEZVOUS_IN_PROCESS=1.
///
/// Each environment is `launcher_env` without DMLC_WORKER_ID and
/// DMLC_SERVER_ID (a per-process id of the launcher's own would be wrong
/// for every child) and TANDEM_MIN_WORKERS, plus DMLC_ROLE,
/// DMLC_PS_ROOT_URI=127.0.0.1, DMLC_PS_ROOT_PORT, DMLC_NUM_SERVER,
/// DMLC_NUM_WORKER, DMLC_NODE_HOST=127.0.0.1, TANDEM_SECRET, TANDEM_JOB_ID,
/// TANDEM_MIN_WORKERS=min_workers when the job is elastic (IsElastic),
/// DMLC_WORKER_ID=i for worker i and DMLC_SERVER_ID=i for server i, and
/// finally options.env.
/// Requires: options valid, identity.job_id set, options.tandem_binary set
/// unless command_runs_all_roles. Pure; any thread.
std::vector<ProcessSpec> BuildLocalJob(const LocalJobOptions& options,
                                       const LocalJobIdentity& identity,
                                       const std::map<std::string, std::string>& launcher_env);

/// A TCP port on 127.0.0.1 that was free a moment ago: binds port 0, reads
/// the kernel's choice and closes the socket. Another process may take it
/// before the scheduler binds it; the scheduler then fails to bind with a
/// clear error and the job is torn down. Throws IoError. Any thread.
uint16_t PickFreeLoopbackPort();

/// The absolute path of this process's executable (/proc/self/exe). Throws
/// IoError. Any thread.
std::string CurrentExecutablePath();

/// Runs the whole job: validates `options`, generates the job id unless
/// given, and then for each attempt (one, or more with options.restarts:
/// RunWithRestarts) picks the scheduler's port, generates the secret,
/// checks that every program exists, starts the scheduler, the servers and
/// the workers under one ProcessSupervisor built with `supervisor_options`,
/// supervises them to the end; returns the launcher's exit code (see
/// process_supervisor.h and job_restarts.h). Every attempt keeps the job
/// id. `launcher_env` is the environment the processes inherit (with
/// TANDEM_RESTART_COUNT and TANDEM_MAX_RESTARTS, AttemptEnvironment).
/// Throws InvalidArgument for bad options or a program that does
/// not exist (before anything started), IoError when a process cannot be
/// started (those already started are killed first). Call it from the
/// thread that lives as long as the job, with SIGINT, SIGTERM, SIGHUP and
/// SIGCHLD not handled by other threads (see ProcessSupervisor).
int RunLocalJob(const LocalJobOptions& options, const SupervisorOptions& supervisor_options,
                const base::Environment& launcher_env);

/// When the job's processes have TANDEM_TIMELINE=PATH: joins the trace files
/// PATH.<pid> that the processes `pids` wrote into PATH (one track per
/// process, docs/metrics.md) and removes them; says so on `sink`. A merge
/// that fails is reported there and leaves the files. Thread: the
/// launcher's.
void MergeJobTimeline(const std::vector<ProcessSpec>& specs, const std::vector<pid_t>& pids,
                      OutputSink sink);

}  // namespace tandem::launch
