#include "launch/restart_policy.h"

#include <fmt/format.h>

#include "base/exit_code.h"
#include "tandem/error.h"

namespace tandem::launch {
namespace {

// What a set-up exit code means, for the reason line; empty for other codes.
std::string_view SetupMeaning(int code) {
  switch (code) {
    case base::kExitUsage:
      return "a usage error (a bad command line)";
    case base::kExitProtocolError:
      return "a protocol error (a peer speaks another protocol or version)";
    case base::kExitAuthFailed:
      return "an authentication failure (wrong TANDEM_SECRET or job id)";
    case base::kExitConfigError:
      return "a configuration error";
    case base::kExitCannotExecute:
      return "a command that cannot be executed";
    case base::kExitNotFound:
      return "a command that was not found";
    default:
      return {};
  }
}

}  // namespace

std::string_view RestartPolicyName(RestartPolicy policy) {
  return policy == RestartPolicy::kExitCode ? "exit-code" : "on-failure";
}

RestartPolicy ParseRestartPolicy(std::string_view text) {
  if (text == "exit-code") return RestartPolicy::kExitCode;
  if (text == "on-failure") return RestartPolicy::kOnFailure;
  throw InvalidArgument(fmt::format(
      "--restart-policy '{}' does not exist: exit-code (restart after a signal or a retryable "
      "exit code 128..255) or on-failure (after any failure but a set-up error)",
      text));
}

void ValidateRestartOptions(const RestartOptions& options) {
  if (options.max_restarts < 0) {
    throw InvalidArgument(
        fmt::format("--max-restarts is {}; it must be 0 or more", options.max_restarts));
  }
  if (options.delay.count() < 0) {
    throw InvalidArgument(
        fmt::format("--restart-delay is {} ms; it must be 0 or more", options.delay.count()));
  }
}

bool IsSetupExitCode(int code) { return !SetupMeaning(code).empty(); }

FailureRetry ClassifyFailure(RestartPolicy policy, const ExitStatus& status) {
  if (!status.signaled && IsSetupExitCode(status.code)) return FailureRetry::kSetup;
  if (policy == RestartPolicy::kExitCode && !base::IsRetryableExitCode(status.ShellCode())) {
    return FailureRetry::kPermanent;
  }
  return FailureRetry::kRetry;
}

std::optional<ProcessExit> AttemptCause(const JobOutcome& outcome) {
  if (!outcome.first_failure) return std::nullopt;
  // A worker that left an elastic job is not a failure of the job.
  for (const ProcessExit& exit : outcome.exits) {
    if (!exit.left && !exit.status.signaled && IsSetupExitCode(exit.status.code)) return exit;
  }
  for (const ProcessExit& exit : outcome.exits) {
    const bool lost_peer = !exit.status.signaled && exit.status.code == base::kExitPeerLost;
    if (!exit.status.success() && !lost_peer && !exit.torn_down && !exit.left) return exit;
  }
  return outcome.first_failure;
}

RestartDecision DecideRestart(const RestartOptions& options, const JobOutcome& outcome,
                              int restarts_done) {
  std::optional<ProcessExit> cause = AttemptCause(outcome);
  if (outcome.interrupt_signal != 0) {
    return {RestartVerdict::kInterrupted,
            fmt::format("the launcher received {}", SignalName(outcome.interrupt_signal)), cause};
  }
  if (!cause) return {RestartVerdict::kFinished, {}, std::nullopt};
  const ExitStatus& status = cause->status;
  const FailureRetry retry = ClassifyFailure(options.policy, status);
  if (retry == FailureRetry::kSetup) {
    return {RestartVerdict::kPermanent,
            fmt::format("{}: {}, which a restart cannot fix", cause->Describe(),
                        SetupMeaning(status.code)),
            cause};
  }
  if (retry == FailureRetry::kPermanent) {
    return {RestartVerdict::kPermanent,
            fmt::format("{}: a permanent failure (exit codes 1..127 are not retried under "
                        "--restart-policy exit-code; on-failure retries them)",
                        cause->Describe()),
            cause};
  }
  if (restarts_done >= options.max_restarts) {
    return {RestartVerdict::kExhausted, cause->Describe(), cause};
  }
  return {RestartVerdict::kRestart, cause->Describe(), cause};
}

std::string DescribeAttempts(const std::vector<std::optional<ProcessExit>>& first_failures) {
  std::string text;
  for (size_t i = 0; i < first_failures.size(); ++i) {
    if (i > 0) text += "; ";
    text += fmt::format("attempt {}: {}", i + 1,
                        first_failures[i] ? first_failures[i]->Describe() : "no process failed");
  }
  return text;
}

}  // namespace tandem::launch
