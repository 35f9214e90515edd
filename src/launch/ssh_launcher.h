// `tandem launch --launcher ssh -H HOSTFILE`: a job across hosts, each
// process started through ssh under `tandem remote-exec` (remote_exec.h),
// all of them supervised by one ProcessSupervisor on the launcher's host.
//
// Placement (docs/launch.md): the scheduler on the first host; server j on
// host j mod H; worker i on the i-th slot of the hostfile (host 1's slots,
// then host 2's, ...; round again when there are more workers than slots).
// Each process's environment travels on ssh's stdin, never on a command
// line; ssh's stdin then stays open, and its end (the launcher tearing the
// job down, or dying) stops the remote process.
#pragma once

#include <chrono>
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
struct SshJobOptions {
  LocalJobOptions job;                ///< counts, command, --env, job id, roles
  std::vector<HostSlots> hosts;       ///< the hostfile, at least one host
  std::string ssh_program = "ssh";    ///< TANDEM_SSH or the default
  std::vector<std::string> ssh_args;  ///< --ssh-arg, before the host
  /// The tandem binary on the remote hosts; empty: the launcher's own path.
  std::string remote_tandem;
  /// Where remote processes start; empty: the launcher's working directory.
  std::string remote_directory;
  /// Copy the launcher's working directory there first (rsync over ssh).
  bool sync_directory = false;
  uint16_t scheduler_port =
      0;  ///< 0: chosen at random below the ephemeral ports (RandomSchedulerPort)
  /// Variables of the launcher's environment to forward by name, besides
  /// those forwarded always (DMLC_*, PS_*, MXNET_*, TANDEM_*, HOROVOD_*).
  std::vector<std::string> forward_env;
  std::chrono::milliseconds check_timeout{std::chrono::seconds(30)};
  /// --host-discovery-script (an elastic job without servers): the hosts
  /// come from this script, run at the start (instead of `hosts`) and every
  /// `discovery_interval` while the job runs, each run within
  /// `discovery_timeout` (host_discovery.h). Empty: `hosts` as given.
  std::string host_discovery_script;
  std::chrono::milliseconds discovery_interval{std::chrono::seconds(1)};
  std::chrono::milliseconds discovery_timeout{std::chrono::seconds(10)};
};

/// Quotes `word` for a POSIX shell: unchanged when it is only letters,
/// digits and `_./:=@%+,-`; else in single quotes with each ' as '\''.
std::string ShellQuote(const std::string& word);

/// Which host (index into options.hosts) runs each process, in the order
/// BuildSshJob returns them: scheduler, servers, workers.
std::vector<size_t> PlaceSshJob(const SshJobOptions& options);

/// The ssh commands of the job, labelled as in a local job ("worker 3"),
/// each with the remote environment as stdin data. Pure; any thread.
/// With `place` (one host index into options.hosts per process, as
/// PlaceSshJob returns), the processes run there instead.
std::vector<ProcessSpec> BuildSshJob(const SshJobOptions& options, const LocalJobIdentity& identity,
                                     const std::map<std::string, std::string>& launcher_env,
                                     const std::vector<size_t>* place = nullptr);

/// The worker count a job with a discovery script starts with, given the
/// slots the script found: the job's worker count (MAX), or all the slots
/// when there are fewer. Throws InvalidArgument when they are fewer than
/// the job's minimum (min_workers; num_workers when not elastic), naming
/// the hosts found. Any thread.
int DiscoveredWorkerCount(const LocalJobOptions& job, const std::vector<HostSlots>& hosts,
                          const std::string& script);

/// Runs the job (with a discovery script: on the hosts it finds, following
/// them while the job runs: docs/launch.md, "Hosts from a discovery
/// script"): checks every host first (ssh reaches it and the remote
/// tandem answers --version with this version, all hosts in parallel within
/// check_timeout; the error lists each failing host and why), syncs the
/// directory if asked, then starts and supervises every process. Returns
/// the launcher's exit code. Throws InvalidArgument (bad options, a host
/// failing its check) and IoError as RunLocalJob does.
int RunSshJob(const SshJobOptions& options, const SupervisorOptions& supervisor_options,
              const base::Environment& launcher_env);

}  // namespace tandem::launch
