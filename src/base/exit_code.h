// tandem's process exit codes: which error ended a tandem process, and
// whether a cluster manager should retry it.
//
// The codes follow Kubeflow's `ExitCode` restart policy (1..127 permanent,
// 128..255 retryable) so that the operators, Indexed Jobs, JobSets and
// Volcano Jobs rendered by `tandem k8s render` restart a job exactly when a
// restart can help. docs/deploy.md ("Exit codes and restarts") is the table
// users read; this file is its source.
#pragma once

#include <exception>
#include <span>

namespace tandem::base {

/// The exit codes of tandem's own processes (`tandem scheduler`, `tandem
/// server`, `tandem launch`, and a program's ServeAssignedRole()).
enum ExitCode : int {
  kExitSuccess = 0,
  kExitError = 1,            ///< any other error (permanent)
  kExitUsage = 2,            ///< bad command line (CLI11's parse errors)
  kExitProtocolError = 76,   ///< a peer broke the wire protocol (EX_PROTOCOL; permanent)
  kExitAuthFailed = 77,      ///< wrong TANDEM_SECRET / job id (EX_NOPERM; permanent)
  kExitConfigError = 78,     ///< unusable configuration or argument (EX_CONFIG; permanent)
  kExitCannotExecute = 126,  ///< the shell's "found but not executable" (permanent)
  kExitNotFound = 127,       ///< the command was not found (permanent; the launcher's exec failure)
  kExitPeerLost = 200,       ///< a node of the job died or became unreachable (retryable)
  kExitTimeout = 201,        ///< a wait ran out of time, e.g. a peer never came up (retryable)
  kExitIoError = 202,        ///< an operating-system call failed (socket, file; retryable)
};

/// The exit code for an exception that ended a process: the table above for
/// tandem's exception types (most derived first), kExitError for any other.
/// Any thread; never throws.
int ExitCodeFor(const std::exception& error) noexcept;

/// True when a process that ended with `code` is worth restarting: the
/// retryable codes above and 128 + N for a death by signal N (SIGKILL from
/// the OOM killer or an eviction, SIGTERM from a drained node). False for 0
/// and for the permanent codes 1..127. Requires 0 <= code <= 255.
bool IsRetryableExitCode(int code) noexcept;

/// The permanent failure codes (1..127) tandem's processes use, ascending:
/// what a pod failure policy lists to fail a job without retrying it.
std::span<const int> PermanentExitCodes() noexcept;

}  // namespace tandem::base
