#include "base/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "tandem/error.h"

namespace tandem::base {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

Config Parse(std::map<std::string, std::string> vars) {
  return Config::FromEnvironment(Environment(std::move(vars)));
}

TEST(ConfigTest, EmptyEnvironmentGivesTheDocumentedDefaults) {
  const Config c = Parse({});
  EXPECT_EQ(c.verbose, 0);
  EXPECT_EQ(c.heartbeat_interval, seconds(1));
  EXPECT_EQ(c.heartbeat_timeout, seconds(10));
  EXPECT_FALSE(c.quiet);
  EXPECT_EQ(c.secret, "");
  EXPECT_FALSE(c.insecure);
  EXPECT_EQ(c.job_id, "tandem");
  EXPECT_EQ(c.connect_timeout, seconds(120));
  EXPECT_EQ(c.handshake_timeout, seconds(10));
  EXPECT_EQ(c.start_timeout, seconds(300));
  EXPECT_EQ(c.barrier_timeout, seconds(600));
  EXPECT_EQ(c.wait_report_interval, seconds(30));
  EXPECT_EQ(c.max_meta_bytes, 16u << 20);
  EXPECT_EQ(c.max_payload_bytes, uint64_t{16} << 30);
}

TEST(ConfigTest, ParsesEveryVariable) {
  const Config c = Parse({{"PS_VERBOSE", "2"},
                          {"PS_HEARTBEAT_INTERVAL", "0.5"},
                          {"PS_HEARTBEAT_TIMEOUT", "3"},
                          {"TANDEM_SECRET", "s3cret"},
                          {"TANDEM_JOB_ID", "job-17"},
                          {"TANDEM_CONNECT_TIMEOUT", "7"},
                          {"TANDEM_HANDSHAKE_TIMEOUT", "1.5"},
                          {"TANDEM_START_TIMEOUT", "60"},
                          {"TANDEM_BARRIER_TIMEOUT", "0.25"},
                          {"TANDEM_WAIT_REPORT_SECONDS", "1.5"},
                          {"TANDEM_MAX_META_BYTES", "2048"},
                          {"TANDEM_MAX_PAYLOAD_BYTES", "1048576"}});
  EXPECT_EQ(c.verbose, 2);
  EXPECT_EQ(c.heartbeat_interval, milliseconds(500));
  EXPECT_EQ(c.heartbeat_timeout, milliseconds(3000));
  EXPECT_EQ(c.secret, "s3cret");
  EXPECT_EQ(c.job_id, "job-17");
  EXPECT_EQ(c.connect_timeout, milliseconds(7000));
  EXPECT_EQ(c.handshake_timeout, milliseconds(1500));
  EXPECT_EQ(c.start_timeout, milliseconds(60000));
  EXPECT_EQ(c.barrier_timeout, milliseconds(250));
  EXPECT_EQ(c.wait_report_interval, milliseconds(1500));
  EXPECT_EQ(c.max_meta_bytes, 2048u);
  EXPECT_EQ(c.max_payload_bytes, 1048576u);
}

// ---- Heartbeats --------------------------------------------------------------

struct HeartbeatCase {
  const char* name;
  std::optional<std::string> interval;
  std::optional<std::string> timeout;
  std::optional<int64_t> interval_ms;  // nullopt: a ConfigError
  int64_t timeout_ms;
};

class HeartbeatTest : public ::testing::TestWithParam<HeartbeatCase> {};

TEST_P(HeartbeatTest, TimeoutMustExceedInterval) {
  const HeartbeatCase& c = GetParam();
  std::map<std::string, std::string> vars;
  if (c.interval) vars["PS_HEARTBEAT_INTERVAL"] = *c.interval;
  if (c.timeout) vars["PS_HEARTBEAT_TIMEOUT"] = *c.timeout;
  if (c.interval_ms) {
    const Config config = Parse(vars);
    EXPECT_EQ(config.heartbeat_interval.count(), *c.interval_ms);
    EXPECT_EQ(config.heartbeat_timeout.count(), c.timeout_ms);
    return;
  }
  try {
    Parse(vars);
    FAIL() << "accepted interval " << c.interval.value_or("(unset)") << ", timeout "
           << c.timeout.value_or("(unset)");
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("PS_HEARTBEAT_TIMEOUT"));
    EXPECT_THAT(e.what(), HasSubstr("PS_HEARTBEAT_INTERVAL"));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, HeartbeatTest,
    ::testing::Values(HeartbeatCase{"Defaults", std::nullopt, std::nullopt, 1000, 10000},
                      HeartbeatCase{"Longer", "5", "6", 5000, 6000},
                      HeartbeatCase{"Equal", "5", "5", std::nullopt, 0},
                      HeartbeatCase{"Shorter", "5", "4", std::nullopt, 0},
                      HeartbeatCase{"IntervalAboveDefaultTimeout", "20", std::nullopt, std::nullopt,
                                    0},
                      // MXNet's 0 ("off") restores the defaults instead.
                      HeartbeatCase{"ZerosMeanDefaults", "0", "0", 1000, 10000},
                      HeartbeatCase{"ZeroIntervalWithTimeout", "0", "2", 1000, 2000},
                      HeartbeatCase{"ZeroTimeoutBelowInterval", "30", "0", std::nullopt, 0}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

// ---- Bad values name their variable --------------------------------------------

struct BadValueCase {
  const char* variable;
  const char* value;
};

class ConfigBadValueTest : public ::testing::TestWithParam<BadValueCase> {};

TEST_P(ConfigBadValueTest, NamesTheVariable) {
  try {
    Parse({{GetParam().variable, GetParam().value}});
    FAIL() << GetParam().variable << "=" << GetParam().value << " was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr(GetParam().variable));
    EXPECT_THAT(e.what(), HasSubstr(GetParam().value));
  }
}

INSTANTIATE_TEST_SUITE_P(Values, ConfigBadValueTest,
                         ::testing::Values(BadValueCase{"PS_VERBOSE", "4"},
                                           BadValueCase{"TANDEM_INSECURE", "maybe"},
                                           BadValueCase{"PS_VERBOSE", "-1"},
                                           BadValueCase{"PS_VERBOSE", "loud"},
                                           BadValueCase{"PS_HEARTBEAT_INTERVAL", "soon"},
                                           BadValueCase{"TANDEM_CONNECT_TIMEOUT", "-3"},
                                           BadValueCase{"TANDEM_START_TIMEOUT", "forever"},
                                           BadValueCase{"TANDEM_MAX_META_BYTES", "512"},
                                           BadValueCase{"TANDEM_MAX_META_BYTES", "2147483648"},
                                           BadValueCase{"TANDEM_MAX_PAYLOAD_BYTES", "-1"},
                                           BadValueCase{"TANDEM_WAIT_REPORT_SECONDS", "0"},
                                           BadValueCase{"TANDEM_WAIT_REPORT_SECONDS", "-1"},
                                           BadValueCase{"TANDEM_WAIT_REPORT_SECONDS", "often"}));

}  // namespace
}  // namespace tandem::base

namespace tandem::base {
namespace {

// PS_VERBOSE's text -> (verbose, quiet): only an explicit 0 is quiet; unset
// or empty keeps the start-up lines.
class ConfigVerbosityTest
    : public ::testing::TestWithParam<std::tuple<std::optional<std::string>, int, bool>> {};

TEST_P(ConfigVerbosityTest, OnlyAnExplicitZeroIsQuiet) {
  const auto& [text, verbose, quiet] = GetParam();
  std::map<std::string, std::string> vars;
  if (text) vars["PS_VERBOSE"] = *text;
  const Config c = Parse(vars);
  EXPECT_EQ(c.verbose, verbose);
  EXPECT_EQ(c.quiet, quiet);
}

INSTANTIATE_TEST_SUITE_P(Values, ConfigVerbosityTest,
                         ::testing::Values(std::tuple{std::nullopt, 0, false},
                                           std::tuple{std::optional<std::string>(""), 0, false},
                                           std::tuple{std::optional<std::string>("0"), 0, true},
                                           std::tuple{std::optional<std::string>("1"), 1, false},
                                           std::tuple{std::optional<std::string>("2"), 2, false}));

class ConfigInsecureTest
    : public ::testing::TestWithParam<std::pair<std::optional<std::string>, bool>> {};

TEST_P(ConfigInsecureTest, TandemInsecureIsABoolean) {
  const auto& [text, insecure] = GetParam();
  std::map<std::string, std::string> vars;
  if (text) vars["TANDEM_INSECURE"] = *text;
  EXPECT_EQ(Parse(vars).insecure, insecure);
}

INSTANTIATE_TEST_SUITE_P(Values, ConfigInsecureTest,
                         ::testing::Values(std::pair{std::optional<std::string>(), false},
                                           std::pair{std::optional<std::string>("0"), false},
                                           std::pair{std::optional<std::string>("1"), true},
                                           std::pair{std::optional<std::string>("yes"), true}));

TEST(ConfigResendTest, DefaultsMatchPsLiteAndDocs) {
  const Config c = Parse({});
  EXPECT_FALSE(c.resend);
  EXPECT_EQ(c.resend_timeout, std::chrono::milliseconds(1000));
  EXPECT_EQ(c.resend_retries, 10);
  EXPECT_EQ(c.resend_window, 1024u);
  EXPECT_EQ(c.drop_percent, 0);
  EXPECT_EQ(c.drop_seed, 0u);
}

TEST(ConfigResendTest, ParsesTheResendVariables) {
  const Config c = Parse({{"PS_RESEND", "1"},
                          {"PS_RESEND_TIMEOUT", "250"},
                          {"TANDEM_RESEND_RETRIES", "3"},
                          {"TANDEM_RESEND_WINDOW", "64"},
                          {"PS_DROP_MSG", "5"},
                          {"TANDEM_DROP_SEED", "42"}});
  EXPECT_TRUE(c.resend);
  EXPECT_EQ(c.resend_timeout, std::chrono::milliseconds(250));
  EXPECT_EQ(c.resend_retries, 3);
  EXPECT_EQ(c.resend_window, 64u);
  EXPECT_EQ(c.drop_percent, 5);
  EXPECT_EQ(c.drop_seed, 42u);
}

TEST(ConfigResendTest, DropWithoutResendIsRefused) {
  try {
    Parse({{"PS_DROP_MSG", "5"}});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("PS_DROP_MSG=5 needs PS_RESEND=1"));
  }
}

TEST(ConfigResendTest, OutOfRangeValuesAreRefused) {
  EXPECT_THROW(Parse({{"PS_RESEND", "1"}, {"PS_DROP_MSG", "101"}}), ConfigError);
  EXPECT_THROW(Parse({{"PS_RESEND_TIMEOUT", "0"}}), ConfigError);
  EXPECT_THROW(Parse({{"TANDEM_RESEND_WINDOW", "0"}}), ConfigError);
}

}  // namespace
}  // namespace tandem::base
