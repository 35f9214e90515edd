// Tests of the restart decision of `tandem launch --max-restarts`
// (src/launch/restart_policy.h): which attempt's end is restarted, under
// each policy, and the words that say why.
#include "launch/restart_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "base/exit_code.h"
#include "tandem/error.h"

namespace tandem::launch {
namespace {

using ::testing::HasSubstr;

ExitStatus Code(int code) { return ExitStatus::Exited(code); }
ExitStatus Signal(int signal) { return ExitStatus::Killed(signal); }

constexpr size_t kNever = 1000;

// An attempt whose processes "worker 0", "worker 1", ... (pids 100, 101,
// ...) ended with `ends` in that order, those from `torn_down_from` on after
// the supervisor's tear-down signals; the first failure is recorded as the
// supervisor does, unless the launcher was interrupted before it.
JobOutcome Outcome(const std::vector<ExitStatus>& ends, int interrupt_signal = 0,
                   bool interrupt_first = false, size_t torn_down_from = kNever) {
  JobOutcome outcome;
  outcome.interrupt_signal = interrupt_signal;
  for (size_t i = 0; i < ends.size(); ++i) {
    ProcessExit exit{"worker " + std::to_string(i), static_cast<pid_t>(100 + i), ends[i], "",
                     i >= torn_down_from};
    outcome.exits.push_back(exit);
    if (!ends[i].success() && !outcome.first_failure && !interrupt_first) {
      outcome.first_failure = exit;
    }
  }
  if (outcome.first_failure)
    outcome.exit_code = outcome.first_failure->status.ShellCode();
  else if (interrupt_signal != 0)
    outcome.exit_code = 128 + interrupt_signal;
  return outcome;
}

struct DecisionCase {
  const char* name;
  std::vector<ExitStatus> ends;
  RestartPolicy policy;
  int restarts_done;
  int max_restarts;
  RestartVerdict verdict;
  const char* reason;  // a part of the reason, "" for none
  int interrupt_signal = 0;
  bool interrupt_first = false;
  size_t torn_down_from = kNever;
};

class RestartDecisionTest : public ::testing::TestWithParam<DecisionCase> {};

TEST_P(RestartDecisionTest, DecidesAsTheExitCodeTableSays) {
  const DecisionCase& c = GetParam();
  RestartOptions options;
  options.policy = c.policy;
  options.max_restarts = c.max_restarts;
  const RestartDecision d = DecideRestart(
      options, Outcome(c.ends, c.interrupt_signal, c.interrupt_first, c.torn_down_from),
      c.restarts_done);
  // The cause is what the reason names (an interrupt names the signal).
  if (d.cause && c.interrupt_signal == 0) {
    EXPECT_THAT(d.reason, HasSubstr(d.cause->Describe()));
  }
  EXPECT_EQ(d.verdict, c.verdict) << d.reason;
  EXPECT_THAT(d.reason, HasSubstr(c.reason));
  if (c.verdict == RestartVerdict::kFinished) {
    EXPECT_EQ(d.reason, "");
  }
}

constexpr auto kExit = RestartPolicy::kExitCode;
constexpr auto kAny = RestartPolicy::kOnFailure;
using V = RestartVerdict;

INSTANTIATE_TEST_SUITE_P(
    Cases, RestartDecisionTest,
    ::testing::Values(
        DecisionCase{"Success", {Code(0), Code(0), Code(0)}, kExit, 0, 3, V::kFinished, ""},
        DecisionCase{"SuccessAfterRestarts", {Code(0)}, kExit, 3, 3, V::kFinished, ""},
        DecisionCase{"KilledWorker",
                     {Code(0), Signal(SIGKILL), Code(200)},
                     kExit,
                     0,
                     3,
                     V::kRestart,
                     "worker 1 (pid 101) killed by signal 9 (SIGKILL)"},
        DecisionCase{"KilledWorkerOnFailurePolicy",
                     {Signal(SIGKILL), Code(200)},
                     kAny,
                     2,
                     3,
                     V::kRestart,
                     "worker 0 (pid 100) killed by signal 9"},
        DecisionCase{"KilledWorkerNoRestartLeft",
                     {Signal(SIGKILL), Code(200)},
                     kExit,
                     3,
                     3,
                     V::kExhausted,
                     "worker 0 (pid 100) killed by signal 9 (SIGKILL)"},
        DecisionCase{"KilledWorkerWithoutRestarts",
                     {Signal(SIGKILL)},
                     kExit,
                     0,
                     0,
                     V::kExhausted,
                     "killed by signal 9"},
        DecisionCase{"Sigterm", {Signal(SIGTERM)}, kExit, 0, 1, V::kRestart, "SIGTERM"},
        DecisionCase{"Segfault", {Signal(SIGSEGV)}, kExit, 0, 1, V::kRestart, "SIGSEGV"},
        DecisionCase{
            "PeerLost", {Code(200), Code(200)}, kExit, 1, 2, V::kRestart, "exited with status 200"},
        DecisionCase{"Timeout", {Code(201)}, kExit, 0, 1, V::kRestart, "status 201"},
        DecisionCase{"IoError", {Code(202)}, kExit, 0, 1, V::kRestart, "status 202"},
        DecisionCase{"ExitOneIsPermanentUnderExitCode",
                     {Code(1), Code(200)},
                     kExit,
                     0,
                     3,
                     V::kPermanent,
                     "exit codes 1..127 are not retried"},
        DecisionCase{"ExitThreeIsPermanentUnderExitCode",
                     {Code(3)},
                     kExit,
                     0,
                     3,
                     V::kPermanent,
                     "worker 0 (pid 100) exited with status 3: a permanent failure"},
        DecisionCase{"ExitOneIsRetriedUnderOnFailure",
                     {Code(1), Code(200)},
                     kAny,
                     0,
                     3,
                     V::kRestart,
                     "worker 0 (pid 100) exited with status 1"},
        DecisionCase{
            "ExitOneNoRestartLeftUnderOnFailure", {Code(1)}, kAny, 1, 1, V::kExhausted, "status 1"},
        DecisionCase{"ConfigError",
                     {Code(78), Code(200)},
                     kExit,
                     0,
                     3,
                     V::kPermanent,
                     "status 78: a configuration error, which a restart cannot fix"},
        DecisionCase{"ConfigErrorUnderOnFailure",
                     {Code(78)},
                     kAny,
                     0,
                     3,
                     V::kPermanent,
                     "a configuration error"},
        DecisionCase{"UsageError", {Code(2)}, kAny, 0, 3, V::kPermanent, "a usage error"},
        DecisionCase{"ProtocolError", {Code(76)}, kAny, 0, 3, V::kPermanent, "a protocol error"},
        DecisionCase{
            "AuthFailed", {Code(77)}, kAny, 0, 3, V::kPermanent, "an authentication failure"},
        DecisionCase{"CannotExecute", {Code(126)}, kAny, 0, 3, V::kPermanent, "cannot be executed"},
        DecisionCase{"NotFound", {Code(127)}, kAny, 0, 3, V::kPermanent, "was not found"},
        // Over ssh a survivor's PeerLost can be reported before the process
        // whose configuration was wrong: the set-up error still decides.
        DecisionCase{"SetupErrorAfterARetryableFirstFailure",
                     {Code(200), Code(78)},
                     kExit,
                     0,
                     3,
                     V::kPermanent,
                     "worker 1 (pid 101) exited with status 78"},
        // Survivors reported before the cause (one reaping sweep, or ssh):
        // the cause decides, not the lost peer's 200.
        DecisionCase{"KilledWorkerReportedAfterASurvivor",
                     {Code(200), Signal(SIGKILL)},
                     kExit,
                     0,
                     3,
                     V::kRestart,
                     "worker 1 (pid 101) killed by signal 9 (SIGKILL)"},
        DecisionCase{"ExitOneReportedAfterASurvivor",
                     {Code(200), Code(1)},
                     kExit,
                     0,
                     3,
                     V::kPermanent,
                     "worker 1 (pid 101) exited with status 1: a permanent"},
        DecisionCase{"OnlyLostPeers",
                     {Code(0), Code(200), Code(200)},
                     kExit,
                     0,
                     3,
                     V::kRestart,
                     "worker 1 (pid 101) exited with status 200"},
        // An end the tear-down brought (SIGTERM after the grace period) is
        // no cause.
        DecisionCase{"TornDownIsNoCause",
                     {Code(200), Signal(SIGTERM), Code(1)},
                     kExit,
                     0,
                     3,
                     V::kRestart,
                     "worker 0 (pid 100) exited with status 200",
                     0,
                     false,
                     1},
        DecisionCase{"InterruptedBeforeAnythingFailed",
                     {Signal(SIGINT), Signal(SIGINT)},
                     kExit,
                     0,
                     3,
                     V::kInterrupted,
                     "the launcher received SIGINT",
                     SIGINT,
                     true},
        DecisionCase{"InterruptedAfterAFailure",
                     {Signal(SIGKILL), Signal(SIGTERM)},
                     kExit,
                     0,
                     3,
                     V::kInterrupted,
                     "the launcher received SIGTERM",
                     SIGTERM,
                     false},
        DecisionCase{"InterruptedUnderOnFailure",
                     {Code(1)},
                     kAny,
                     0,
                     3,
                     V::kInterrupted,
                     "SIGHUP",
                     SIGHUP,
                     false}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

class SetupExitCodeTest : public ::testing::TestWithParam<std::pair<int, bool>> {};

TEST_P(SetupExitCodeTest, OnlyTheSetUpCodesAreSetUpErrors) {
  EXPECT_EQ(IsSetupExitCode(GetParam().first), GetParam().second) << GetParam().first;
}

INSTANTIATE_TEST_SUITE_P(Codes, SetupExitCodeTest,
                         ::testing::Values(std::pair{0, false}, std::pair{1, false},
                                           std::pair{2, true}, std::pair{3, false},
                                           std::pair{75, false}, std::pair{76, true},
                                           std::pair{77, true}, std::pair{78, true},
                                           std::pair{79, false}, std::pair{125, false},
                                           std::pair{126, true}, std::pair{127, true},
                                           std::pair{128, false}, std::pair{137, false},
                                           std::pair{200, false}, std::pair{255, false}));

TEST(SetupExitCodeTest, EveryPermanentTandemCodeButTheGenericOneIsASetUpError) {
  for (int code : base::PermanentExitCodes()) {
    EXPECT_EQ(IsSetupExitCode(code), code != base::kExitError) << code;
  }
}

TEST(AttemptCauseTest, NothingWhenNoProcessFailed) {
  EXPECT_FALSE(AttemptCause(Outcome({Code(0), Code(0)})).has_value());
  EXPECT_FALSE(AttemptCause(Outcome({Signal(SIGINT)}, SIGINT, true)).has_value());
}

TEST(AttemptCauseTest, PrefersASetUpErrorThenARealFailureThenTheFirst) {
  EXPECT_EQ(AttemptCause(Outcome({Signal(SIGKILL), Code(77)}))->pid, 101);
  EXPECT_EQ(AttemptCause(Outcome({Code(200), Code(202)}))->pid, 101);
  EXPECT_EQ(AttemptCause(Outcome({Code(200), Code(200)}))->pid, 100);
  EXPECT_EQ(AttemptCause(Outcome({Code(200), Signal(SIGKILL)}, 0, false, 1))->pid, 100);
}

// A worker that left an elastic job (--workers MIN:MAX) failed, but the
// job went on: it is never the attempt's cause, even with a set-up code,
// and an attempt whose only failures are such departures needs no restart.
TEST(AttemptCauseTest, AWorkerThatLeftAnElasticJobIsNeverTheCause) {
  JobOutcome outcome = Outcome({Code(78), Signal(SIGKILL), Code(0)});
  outcome.exits[0].left = true;
  outcome.exits[1].left = false;
  outcome.first_failure = outcome.exits[1];
  EXPECT_EQ(AttemptCause(outcome)->pid, 101);

  JobOutcome survived = Outcome({Signal(SIGKILL), Code(0), Code(0)});
  survived.exits[0].left = true;
  survived.first_failure.reset();  // as the supervisor reports a departure
  survived.exit_code = 0;
  EXPECT_FALSE(AttemptCause(survived).has_value());
  RestartOptions options;
  options.max_restarts = 3;
  EXPECT_EQ(DecideRestart(options, survived, 0).verdict, RestartVerdict::kFinished);
}

TEST(RestartPolicyTest, ParsesAndNamesBothPolicies) {
  for (RestartPolicy p : {RestartPolicy::kExitCode, RestartPolicy::kOnFailure}) {
    EXPECT_EQ(ParseRestartPolicy(RestartPolicyName(p)), p);
  }
  EXPECT_EQ(RestartPolicyName(RestartPolicy::kExitCode), "exit-code");
  EXPECT_EQ(RestartPolicyName(RestartPolicy::kOnFailure), "on-failure");
}

TEST(RestartPolicyTest, AnUnknownPolicyIsRefusedNamingTheChoices) {
  try {
    ParseRestartPolicy("always");
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("--restart-policy 'always'"));
    EXPECT_THAT(e.what(), HasSubstr("exit-code"));
    EXPECT_THAT(e.what(), HasSubstr("on-failure"));
  }
}

TEST(RestartPolicyTest, NegativeOptionsAreRefusedNamingTheOption) {
  RestartOptions options;
  EXPECT_NO_THROW(ValidateRestartOptions(options));
  options.max_restarts = -1;
  EXPECT_THROW(
      {
        try {
          ValidateRestartOptions(options);
        } catch (const InvalidArgument& e) {
          EXPECT_THAT(e.what(), HasSubstr("--max-restarts is -1"));
          throw;
        }
      },
      InvalidArgument);
  options.max_restarts = 2;
  options.delay = std::chrono::milliseconds(-5);
  EXPECT_THROW(ValidateRestartOptions(options), InvalidArgument);
}

TEST(RestartPolicyTest, DescribesEveryAttemptsFirstFailureInOrder) {
  const ProcessExit a{"worker 1", 10, Signal(SIGKILL), ""};
  const ProcessExit b{"server 0", 20, Code(200), "h2"};
  EXPECT_EQ(DescribeAttempts({a, b, std::nullopt}),
            "attempt 1: worker 1 (pid 10) killed by signal 9 (SIGKILL); attempt 2: server 0 on h2 "
            "(pid 20) exited with status 200; attempt 3: no process failed");
  EXPECT_EQ(DescribeAttempts({}), "");
}

}  // namespace
}  // namespace tandem::launch
