// `tandem launch --launcher sge`: a job in a Grid Engine parallel
// environment (PE), as Open MPI's mpirun runs under Grid Engine's tight
// integration. docs/launch.md, "Through Grid Engine".
//
// Inside a PE job ($PE_HOSTFILE is set: a job script submitted with `qsub
// -pe PE N`, or an interactive `qrsh -pe PE N`) the launcher reads the
// granted hosts and slots from $PE_HOSTFILE, places the job's processes on
// the slots in order (the first host's slots, then the second's, ...: the
// scheduler, the servers, then the workers), and starts each as a task of
// the job with `qrsh -inherit -V -noshell HOST TANDEM remote-exec ...`, all
// supervised by one ProcessSupervisor as the ssh launcher's are. Grid
// Engine gives a task no rank, so the launcher gives it its whole contract
// (role, rank, scheduler, secret) on qrsh's stdin (remote_exec.h), never on
// a command line or in the job's spooled environment; stdin stays open, and
// its end (the launcher tearing the job down, or dying) stops the task.
//
// Outside a PE job the launcher submits one: `qrsh -now no -pe PE SLOTS
// -cwd -V -noshell TANDEM launch --launcher sge ...` runs the same launch
// inside the granted slots and streams its output back. When the job fails,
// that inner launcher ends with a report in `tandem rank-exec`'s form
// ("[rank-exec] job failed: worker 1 on node07 (pid 4711) ..."), which the
// outer one relays, so the outer exit code and last line name the failed
// process.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/environment.h"
#include "launch/child_process.h"
#include "launch/hostfile.h"
#include "launch/local_launcher.h"
#include "launch/process_supervisor.h"

namespace tandem::launch {

/// Set (to 1) by the launcher that submits a job through qrsh for the
/// launcher it starts inside the job: when the job fails, that one ends
/// with a failure report in `tandem rank-exec`'s form, which the outer one
/// relays (ProcessSpec::relays_rank_exec).
inline constexpr const char* kSgeInnerLauncherVariable = "TANDEM_SGE_INNER_LAUNCHER";

/// What the user asked for. Thread-safety: a value type.
struct SgeJobOptions {
  LocalJobOptions job;        ///< counts, command, --env, job id, roles, restarts
  std::string qrsh = "qrsh";  ///< TANDEM_QRSH or the default
  /// --sge-pe: the parallel environment to submit the job into when the
  /// launcher runs outside a Grid Engine job; must be empty inside one.
  std::string parallel_environment;
  /// --sge-arg: arguments for the submitting qrsh (outside a job), before
  /// the program, e.g. {"-q", "gpu.q", "-l", "h_rt=1:00:00"}.
  std::vector<std::string> submit_args;
  uint16_t scheduler_port = 0;  ///< 0: random below the ephemeral ports (RandomSchedulerPort)
  /// Given to the launcher inside a submitted job: --teardown-grace, in
  /// milliseconds, and --log-dir (an absolute path, or empty).
  int64_t teardown_grace_ms = 10000;
  std::string log_dir;
};

/// Parses the text of $PE_HOSTFILE (read from `source`, named in errors):
/// one line per granted host, "HOST SLOTS QUEUE PROCESSORS" separated by
/// blanks (only the first two fields are read). Throws ConfigError naming
/// the source and line for a line without a host and a positive slot
/// count, a host given twice, or no host at all. Pure.
std::vector<HostSlots> ParsePeHostfile(std::string_view text, const std::string& source);

/// Reads and parses the file `path`. Throws ConfigError when it cannot be
/// read, and as ParsePeHostfile.
std::vector<HostSlots> ReadPeHostfile(const std::string& path);

/// Which host (index into `hosts`) runs each of `processes` processes in
/// the launcher's order (scheduler, servers, workers): the first host's
/// slots, then the second's, ..., one task per slot, as Grid Engine
/// accepts at most as many tasks on a host as it granted slots there.
/// Throws InvalidArgument naming both counts when the slots are fewer than
/// the processes. Pure.
std::vector<size_t> PlaceSgeJob(const std::vector<HostSlots>& hosts, int processes);

/// The `qrsh -inherit` commands of the job inside Grid Engine job
/// `sge_job_id`, labelled as in a local job ("worker 3"), each with its
/// contract as stdin data for `tandem remote-exec` and `launcher_env`
/// (without TANDEM_SECRET and the per-process variables of a launcher's
/// own environment) as qrsh's environment, which -V hands to the task.
/// Requires options.job valid, job.tandem_binary set, `hosts` with enough
/// slots (PlaceSgeJob). Pure.
std::vector<ProcessSpec> BuildSgeJob(const SgeJobOptions& options,
                                     const std::vector<HostSlots>& hosts,
                                     const LocalJobIdentity& identity,
                                     const std::map<std::string, std::string>& launcher_env,
                                     const std::string& working_directory);

/// The qrsh that submits the job from outside Grid Engine: `qrsh -now no
/// -pe PE SLOTS -cwd -V -noshell -N tandem [submit_args...] TANDEM launch
/// --launcher sge ... -- COMMAND...` with SLOTS the job's process count,
/// and `launcher_env` plus kSgeInnerLauncherVariable as its environment;
/// stopped with SIGINT (ProcessSpec::stop_with_two_sigints), which qrsh
/// ends on, where it stays on SIGTERM.
/// The inner launch gets the job's counts, roles, --env, job id, restart
/// options, grace, log directory and scheduler port. Requires options.job
/// valid with job_id and tandem_binary set, and a parallel environment.
/// Pure.
ProcessSpec BuildSgeSubmission(const SgeJobOptions& options,
                               const std::map<std::string, std::string>& launcher_env);

/// Runs the job: inside a Grid Engine PE job ($PE_HOSTFILE set) through
/// qrsh -inherit, else by submitting one through qrsh (which needs
/// options.parallel_environment). Returns the launcher's exit code. Throws
/// InvalidArgument for bad options (--sge-pe inside a job or missing
/// outside one, too few slots), ConfigError for an unreadable
/// $PE_HOSTFILE or a missing JOB_ID, and IoError as RunLocalJob does.
int RunSgeJob(const SgeJobOptions& options, const SupervisorOptions& supervisor_options,
              const base::Environment& launcher_env);

}  // namespace tandem::launch
