// `tandem remote-exec`: what `tandem launch --launcher ssh` runs on each
// remote host, between sshd and the user's command.
//
// The launcher writes the process's environment to ssh's stdin (so that the
// job's secret never appears on a command line) and then keeps stdin open
// for as long as it wants the process to live. remote-exec reads that
// environment, starts the command in a process group of its own, and
// watches stdin: end-of-file means the launcher went away (killed, or it
// killed its ssh client to tear the job down), and the whole group is then
// stopped (SIGTERM, SIGKILL after the grace period). docs/launch.md gives
// the stdin format.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "launch/child_process.h"
#include "launch/hostfile.h"

namespace tandem::launch {

/// Encodes `vars` as the stdin header remote-exec reads: the line
/// "TANDEM-ENV/1", then one netstring per variable ("<length>:NAME=VALUE,"),
/// then "0:,". Values may hold any byte. Throws InvalidArgument for a name
/// that is not [A-Za-z_][A-Za-z0-9_]*.
std::string EncodeRemoteEnvironment(const std::map<std::string, std::string>& vars);

/// The stdin contract (EncodeRemoteEnvironment) of each process of a job
/// started on other hosts (the ssh and Grid Engine launchers), in `local`'s
/// order (BuildLocalJob's: scheduler, servers, workers): `base`, then the
/// process's own variables from the local plan, then, for the last
/// `num_workers` processes, torchrun's and Horovod's variables placed on
/// their hosts (process i runs on `hosts[place[i]]`; MASTER_ADDR is worker
/// 0's host), DMLC_PS_ROOT_URI = `scheduler_host`, and every --env
/// (`job_env`) last. DMLC_NODE_HOST is dropped: each process finds its own
/// route to the scheduler. Pure.
std::vector<std::map<std::string, std::string>> RemoteContracts(
    const std::vector<ProcessSpec>& local, const std::vector<size_t>& place,
    const std::vector<HostSlots>& hosts, int num_workers, uint16_t master_port,
    const std::string& scheduler_host,
    const std::vector<std::pair<std::string, std::string>>& job_env,
    const std::map<std::string, std::string>& base);

/// Reads one header from `fd` (byte by byte, so nothing after it is
/// consumed) within `timeout`. Throws ProtocolError (not the format, a
/// netstring longer than the 60 KiB limit), Timeout, IoError.
std::map<std::string, std::string> ReadRemoteEnvironment(int fd, std::chrono::milliseconds timeout);

struct RemoteExecOptions {
  std::vector<std::string> command;                          ///< looked up in the resulting PATH
  std::string working_directory;                             ///< empty: stay where sshd started us
  std::map<std::string, std::string> environment;            ///< the complete environment
  std::chrono::milliseconds grace{std::chrono::seconds(3)};  ///< SIGTERM to SIGKILL
  int watch_fd = 0;  ///< end-of-file here stops the command (stdin)
  /// The process's label ("worker 3"): its timeline file PATH.<pid> is
  /// renamed PATH.<label> when it ends (launch/rank_timeline.h).
  std::string label = "process";
};

/// Runs the command as described above and returns remote-exec's exit
/// code: the command's (128 + signal when killed), or 128 + SIGTERM when it
/// was stopped because the launcher went away. SIGINT, SIGTERM and SIGHUP
/// received are forwarded to the command's group; SIGCHLD, SIGINT, SIGTERM,
/// SIGHUP and SIGPIPE stay blocked in the calling thread afterwards (the
/// process exits after it). Throws IoError when the command cannot be
/// started (naming it and the reason).
int RunRemoteExec(const RemoteExecOptions& options);

}  // namespace tandem::launch
