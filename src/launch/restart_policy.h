// Whole-job restarts (`tandem launch --max-restarts N`): which ends of a job
// attempt are worth starting the whole job again, and the words the launcher
// uses to say so. Pure; docs/launch.md ("Restarts") is the user's
// description.
//
// The decision follows tandem's exit-code table (src/base/exit_code.h,
// docs/deploy.md "Exit codes and restarts"), which follows Kubeflow's
// `ExitCode` restart policy:
//  - Nothing failed (success, an interrupt alone, services that did not
//    end after the workers succeeded): no restart.
//  - The launcher was interrupted (SIGINT, SIGTERM, SIGHUP): never a
//    restart, whatever failed.
//  - The attempt's cause decides (AttemptCause): some process that exited
//    with a code that names a problem of the job's set-up (2 usage, 76
//    protocol, 77 authentication, 78 configuration, 126 not executable, 127
//    not found), else the first failure that is not a lost peer's 200, else
//    the first failure. A set-up error means no restart under either
//    policy: the next attempt would fail the same way.
//  - Policy exit-code (the default): restart when the cause is retryable
//    (128..255: a signal, PeerLost, Timeout, IoError).
//  - Policy on-failure: restart after any other failure too (a Python
//    program's uncaught exception exits 1).
//  - At most max_restarts restarts.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launch/process_supervisor.h"

namespace tandem::launch {

/// Which failures a restart may follow (--restart-policy).
enum class RestartPolicy {
  kExitCode,   ///< "exit-code": only retryable codes (128..255), as Kubeflow's ExitCode
  kOnFailure,  ///< "on-failure": any failure but the set-up codes, as Kubeflow's OnFailure
};

/// "exit-code" or "on-failure". Any thread.
std::string_view RestartPolicyName(RestartPolicy policy);

/// Parses --restart-policy. Throws InvalidArgument quoting `text` and
/// naming the accepted values. Any thread.
RestartPolicy ParseRestartPolicy(std::string_view text);

/// What the user asked for. Thread-safety: a value type.
struct RestartOptions {
  int max_restarts = 0;                             ///< --max-restarts, >= 0
  std::chrono::milliseconds delay{1000};            ///< --restart-delay, >= 0
  RestartPolicy policy = RestartPolicy::kExitCode;  ///< --restart-policy
};

/// Throws InvalidArgument, naming the option, for a negative max_restarts
/// or delay. Any thread.
void ValidateRestartOptions(const RestartOptions& options);

/// True for the exit codes that name a problem of the job's set-up, which
/// no restart can fix: 2, 76, 77, 78, 126 and 127. Any thread.
bool IsSetupExitCode(int code);

/// Whether a failure may be followed by a new start, under a policy: the
/// rule shared by whole-job restarts (DecideRestart) and the replacement of
/// a single departed worker (ProcessSupervisor).
enum class FailureRetry {
  kRetry,      ///< the policy starts again after it
  kSetup,      ///< a set-up code (IsSetupExitCode): never, under either policy
  kPermanent,  ///< exit codes 1..127 under kExitCode: not retried
};

/// Classifies the failure `status` (not a success) under `policy`. Pure.
FailureRetry ClassifyFailure(RestartPolicy policy, const ExitStatus& status);

/// What to do after one attempt of the job.
enum class RestartVerdict {
  kFinished,     ///< nothing failed: the job's result stands
  kInterrupted,  ///< the launcher was interrupted: stop
  kPermanent,    ///< a failure no restart can fix: stop
  kExhausted,    ///< a retryable failure, but max_restarts restarts were made
  kRestart,      ///< start the whole job again
};

/// The verdict and, for every verdict but kFinished, why, in words the
/// launcher prints ("worker 1 (pid 1234) killed by signal 9 (SIGKILL)",
/// "worker 0 (pid 77) exited with status 78: a configuration error, which a
/// restart cannot fix"). Thread-safety: a value type.
struct RestartDecision {
  RestartVerdict verdict = RestartVerdict::kFinished;
  std::string reason;
  /// The attempt's cause (AttemptCause), when a process failed.
  std::optional<ProcessExit> cause;
};

/// The failure that caused an attempt's end, robust to the order in which
/// ends are reported (processes reaped in one sweep come in start order;
/// over ssh a survivor's report can overtake the cause's): the first exit
/// with a set-up code (IsSetupExitCode); else the first failure that is
/// neither a lost peer's 200 (kExitPeerLost, a consequence) nor an end the
/// tear-down brought (ProcessExit::torn_down); else outcome.first_failure.
/// Workers that left an elastic job (ProcessExit::left) are never the
/// cause. Nothing when no process failed. Pure.
std::optional<ProcessExit> AttemptCause(const JobOutcome& outcome);

/// Decides what follows an attempt that ended with `outcome`, after
/// `restarts_done` restarts (0 after the first attempt). See the file
/// comment. Requires: options valid, restarts_done >= 0. Pure.
RestartDecision DecideRestart(const RestartOptions& options, const JobOutcome& outcome,
                              int restarts_done);

/// The line naming every attempt's cause (AttemptCause), in order:
/// "attempt 1: worker 1 (pid 10) killed by signal 9 (SIGKILL); attempt 2:
/// ...". An attempt without a failure (`std::nullopt`) reads "attempt 3:
/// no process failed". Pure.
std::string DescribeAttempts(const std::vector<std::optional<ProcessExit>>& first_failures);

}  // namespace tandem::launch
