#include "launch/job_restarts.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace tandem::launch {
namespace {

std::string Restarts(int n) { return n == 1 ? "1 restart" : fmt::format("{} restarts", n); }

// " and 2 replacements of workers" when workers were replaced, else "".
std::string Replacements(int n) {
  if (n == 0) return {};
  return fmt::format(" and {} replacement{} of workers", n, n == 1 ? "" : "s");
}

}  // namespace

std::map<std::string, std::string> AttemptEnvironment(
    const std::map<std::string, std::string>& launcher_env, int restart_count, int max_restarts) {
  std::map<std::string, std::string> env = launcher_env;
  env["TANDEM_RESTART_COUNT"] = std::to_string(restart_count);
  env["TANDEM_MAX_RESTARTS"] = std::to_string(max_restarts);
  return env;
}

int RunWithRestarts(const RestartOptions& restarts, const SupervisorOptions& supervisor_options,
                    const base::Environment& launcher_env, const JobAttempt& attempt) {
  ValidateRestartOptions(restarts);
  OutputSink sink(supervisor_options.stderr_fd);
  auto log = [&sink](const std::string& text) { sink.WriteLine("[launcher] " + text + "\n"); };
  std::vector<std::optional<ProcessExit>> causes;  // of every attempt
  int replaced = 0;                                // workers replaced in the attempts so far
  for (int restart = 0;; ++restart) {
    // One supervisor per attempt, alive through the delay that follows it:
    // its signalfd is what notices an interrupt during the delay.
    SupervisorOptions options = supervisor_options;
    options.append_logs = options.append_logs || restart > 0;  // keep the failed attempts' logs
    // Replacements of single workers and restarts of the job share the budget.
    options.max_replacements =
        std::max(0, std::min(options.max_replacements, restarts.max_restarts - restart - replaced));
    ProcessSupervisor supervisor(options);
    const JobOutcome outcome =
        attempt(supervisor,
                AttemptEnvironment(launcher_env.vars(), restart + replaced, restarts.max_restarts));
    if (restarts.max_restarts == 0) return outcome.exit_code;
    replaced += outcome.replacements;
    const RestartDecision decision = DecideRestart(restarts, outcome, restart + replaced);
    causes.push_back(decision.cause);
    const std::string attempts =
        restart > 0 ? fmt::format(" ({})", DescribeAttempts(causes)) : std::string();
    // A failed attempt ends the launcher with its cause's code, which the
    // supervisor's first failure is unless ends were reported out of order.
    const int code = decision.cause ? decision.cause->status.ShellCode() : outcome.exit_code;
    switch (decision.verdict) {
      case RestartVerdict::kFinished:
        if (restart > 0 && outcome.exit_code == 0) {
          log(fmt::format("job succeeded after {}", Restarts(restart)));
        }
        return outcome.exit_code;
      case RestartVerdict::kInterrupted:
        log(fmt::format("not restarting the job: {}{}", decision.reason, attempts));
        return outcome.exit_code;  // as without restarts: the first of failure and interrupt
      case RestartVerdict::kPermanent:
        log(fmt::format("not restarting the job: {}{}", decision.reason, attempts));
        return code;
      case RestartVerdict::kExhausted:
        log(fmt::format("job failed after {} attempts{}, no restart left (--max-restarts {}): {}",
                        restart + 1, Replacements(replaced), restarts.max_restarts,
                        DescribeAttempts(causes)));
        return code;
      case RestartVerdict::kRestart:
        break;
    }
    log(fmt::format("restarting the job (restart {} of {}) after {}; starting it again in {:g} s",
                    restart + replaced + 1, restarts.max_restarts, decision.reason,
                    restarts.delay.count() / 1000.0));
    if (const int signal = supervisor.WaitForInterrupt(restarts.delay); signal != 0) {
      log(fmt::format("received {} during the restart delay; not restarting the job ({})",
                      SignalName(signal), DescribeAttempts(causes)));
      return code;
    }
  }
}

}  // namespace tandem::launch
