// A process joining a job from its environment refuses to start without
// TANDEM_SECRET unless TANDEM_INSECURE=1, and says how to pass one under the
// launcher that started it.
#include "cluster/job_secret_requirement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/environment.h"
#include "base/logger.h"
#include "support/log_capture.h"
#include "tandem/error.h"

namespace tandem::cluster {
namespace {

using ::testing::HasSubstr;

base::Config ConfigOf(std::map<std::string, std::string> vars) {
  return base::Config::FromEnvironment(base::Environment(std::move(vars)));
}

struct MissingSecretCase {
  const char* name;
  const char* contract;  // TANDEM_STARTUP_CONTRACT as resolved
  const char* hint;      // the launcher-specific part of the message
};

class MissingSecretTest : public ::testing::TestWithParam<MissingSecretCase> {};

TEST_P(MissingSecretTest, RefusesWithTheVariablesAndTheLaunchersHint) {
  base::Logger log("worker", 0, -1);
  for (const char* secret : {static_cast<const char*>(""), static_cast<const char*>(nullptr)}) {
    std::map<std::string, std::string> vars;
    if (secret) vars["TANDEM_SECRET"] = secret;
    try {
      RequireJobSecret(ConfigOf(vars), GetParam().contract, log);
      FAIL() << "a job without a secret was allowed (" << GetParam().name << ")";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr("TANDEM_SECRET is not set"));
      EXPECT_THAT(e.what(), HasSubstr("every process of a job needs the same secret"));
      EXPECT_THAT(e.what(), HasSubstr("TANDEM_INSECURE=1"));
      EXPECT_THAT(e.what(), HasSubstr(GetParam().hint));
      EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("rank 1 of 2")));  // the name only
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Contracts, MissingSecretTest,
    ::testing::Values(
        MissingSecretCase{"dmlc", "dmlc: worker (scheduler 127.0.0.1:9000, 1 servers, 2 workers)",
                          "start-up contract dmlc)"},
        MissingSecretCase{"torchrun",
                          "torchrun: rank 1 of 2 (local 1 of 2, node 0 of 1), coordinator x:1",
                          "torchrun hands its own environment to every worker"},
        MissingSecretCase{"pytorchjob", "pytorchjob: rank 1 of 2 (local 0 of 1, node 1 of 2)",
                          "tandem k8s render"},
        MissingSecretCase{"ompi", "ompi: rank 1 of 2 (local 1 of 2, node 0 of 1)",
                          "mpirun -x TANDEM_SECRET"},
        MissingSecretCase{"slurm", "slurm: rank 1 of 2 (local 1 of 2, node 0 of 1)",
                          "export TANDEM_SECRET before srun"}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(JobSecretRequirementTest, InsecureModeStartsWithOneWarning) {
  testing::LogCapture capture;
  RequireJobSecret(ConfigOf({{"TANDEM_INSECURE", "1"}, {"TANDEM_JOB_ID", "j7"}}), "dmlc",
                   capture.logger());
  const std::string text = capture.Text();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_THAT(text, HasSubstr(" W] TANDEM_INSECURE=1 and no TANDEM_SECRET"));
  EXPECT_THAT(text, HasSubstr("job 'j7'"));
}

TEST(JobSecretRequirementTest, ASecretPassesSilentlyWithOrWithoutInsecureMode) {
  for (const char* insecure : {"0", "1"}) {
    testing::LogCapture capture;
    RequireJobSecret(ConfigOf({{"TANDEM_SECRET", "ab12"}, {"TANDEM_INSECURE", insecure}}),
                     "torchrun: rank 0 of 1", capture.logger());
    EXPECT_EQ(capture.Text(), "") << "TANDEM_INSECURE=" << insecure;
  }
}

}  // namespace
}  // namespace tandem::cluster
