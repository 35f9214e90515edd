#include "base/environment.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "tandem/error.h"

namespace tandem::base {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

constexpr const char* kVar = "TANDEM_TEST_VALUE";

Environment With(const std::string& value) { return Environment({{kVar, value}}); }

// Runs `f`, which must throw ConfigError; returns the message.
template <typename F>
std::string ConfigErrorOf(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError was thrown";
  return "";
}

// ---- GetInt ------------------------------------------------------------------

struct IntCase {
  const char* name;
  std::optional<std::string> value;  // nullopt: unset
  int64_t min;
  int64_t max;
  std::optional<int64_t> expected;  // nullopt: ConfigError
  const char* error_part;           // a part of the expected message
};

class GetIntTest : public ::testing::TestWithParam<IntCase> {};

TEST_P(GetIntTest, ParsesOrNamesTheVariable) {
  const IntCase& c = GetParam();
  const Environment env = c.value ? With(*c.value) : Environment();
  if (c.expected) {
    EXPECT_EQ(env.GetInt(kVar, -99, c.min, c.max), *c.expected);
  } else {
    const std::string message = ConfigErrorOf([&] { env.GetInt(kVar, -99, c.min, c.max); });
    EXPECT_THAT(message, HasSubstr(kVar));
    EXPECT_THAT(message, HasSubstr(c.error_part));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GetIntTest,
    ::testing::Values(
        IntCase{"Plain", "42", INT64_MIN, INT64_MAX, 42, ""},
        IntCase{"Negative", "-7", INT64_MIN, INT64_MAX, -7, ""},
        IntCase{"Unset", std::nullopt, 0, 10, -99, ""},
        IntCase{"EmptyMeansUnset", "", 0, 10, -99, ""}, IntCase{"AtMin", "0", 0, 10, 0, ""},
        IntCase{"AtMax", "10", 0, 10, 10, ""},
        IntCase{"Int64Max", "9223372036854775807", INT64_MIN, INT64_MAX, INT64_MAX, ""},
        IntCase{"BelowMin", "-1", 0, 10, std::nullopt, "out of range [0, 10]"},
        IntCase{"AboveMax", "11", 0, 10, std::nullopt, "out of range [0, 10]"},
        IntCase{"TrailingGarbage", "12abc", INT64_MIN, INT64_MAX, std::nullopt, "'12abc'"},
        IntCase{"Word", "many", INT64_MIN, INT64_MAX, std::nullopt, "not an integer"},
        IntCase{"LeadingSpace", " 5", INT64_MIN, INT64_MAX, std::nullopt, "not an integer"},
        IntCase{"TrailingSpace", "5 ", INT64_MIN, INT64_MAX, std::nullopt, "not an integer"},
        IntCase{"Fraction", "1.5", INT64_MIN, INT64_MAX, std::nullopt, "'1.5'"},
        IntCase{"TooBigForInt64", "9223372036854775808", INT64_MIN, INT64_MAX, std::nullopt,
                "not an integer"}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

// ---- GetBool -----------------------------------------------------------------

struct BoolCase {
  std::string value;
  bool expected;
};

class GetBoolTest : public ::testing::TestWithParam<BoolCase> {};

TEST_P(GetBoolTest, AcceptsEverySpellingInAnyCase) {
  // The fallback is the opposite, so a silently ignored value fails.
  EXPECT_EQ(With(GetParam().value).GetBool(kVar, !GetParam().expected), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(Spellings, GetBoolTest,
                         ::testing::Values(BoolCase{"1", true}, BoolCase{"true", true},
                                           BoolCase{"TRUE", true}, BoolCase{"Yes", true},
                                           BoolCase{"on", true}, BoolCase{"ON", true},
                                           BoolCase{"0", false}, BoolCase{"false", false},
                                           BoolCase{"False", false}, BoolCase{"no", false},
                                           BoolCase{"OFF", false}));

class GetBoolErrorTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GetBoolErrorTest, RejectsOtherTextNamingVariableAndValue) {
  const std::string message = ConfigErrorOf([&] { With(GetParam()).GetBool(kVar, false); });
  EXPECT_THAT(message, HasSubstr(kVar));
  EXPECT_THAT(message, HasSubstr("'" + GetParam() + "'"));
}

INSTANTIATE_TEST_SUITE_P(Garbage, GetBoolErrorTest,
                         ::testing::Values("2", "y", "truth", "enable", " 1", "-1"));

TEST(GetBoolTest, UnsetOrEmptyGivesTheFallback) {
  EXPECT_TRUE(Environment().GetBool(kVar, true));
  EXPECT_FALSE(Environment().GetBool(kVar, false));
  EXPECT_TRUE(With("").GetBool(kVar, true));
}

// ---- GetSeconds --------------------------------------------------------------

struct SecondsCase {
  std::string value;
  int64_t expected_ms;
};

class GetSecondsTest : public ::testing::TestWithParam<SecondsCase> {};

TEST_P(GetSecondsTest, ConvertsToMilliseconds) {
  EXPECT_EQ(With(GetParam().value).GetSeconds(kVar, milliseconds(-1)).count(),
            GetParam().expected_ms);
}

INSTANTIATE_TEST_SUITE_P(Values, GetSecondsTest,
                         ::testing::Values(SecondsCase{"0", 0}, SecondsCase{"2", 2000},
                                           SecondsCase{"0.5", 500}, SecondsCase{"0.25", 250},
                                           SecondsCase{"1e-3", 1}, SecondsCase{"90", 90000},
                                           SecondsCase{"1.75", 1750}, SecondsCase{"", -1}));

class GetSecondsErrorTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GetSecondsErrorTest, RejectsNegativeAndUnparsableNamingTheVariable) {
  const std::string message =
      ConfigErrorOf([&] { With(GetParam()).GetSeconds(kVar, milliseconds(0)); });
  EXPECT_THAT(message, HasSubstr(kVar));
  EXPECT_THAT(message, HasSubstr("'" + GetParam() + "'"));
}

INSTANTIATE_TEST_SUITE_P(Garbage, GetSecondsErrorTest,
                         ::testing::Values("-1", "-0.5", "abc", "1s", "5 min", "inf", "nan",
                                           "1e10"));

// ---- GetDouble ---------------------------------------------------------------

TEST(EnvironmentTest, GetDoubleReadsDecimalsWithinTheRange) {
  EXPECT_EQ(With("2.5").GetDouble(kVar, -1, 0, 10), 2.5);
  EXPECT_EQ(With("1e-3").GetDouble(kVar, -1, 0, 1), 0.001);
  EXPECT_EQ(With("").GetDouble(kVar, 7.5, 0, 1), 7.5);  // empty: the fallback
  EXPECT_EQ(With("1").GetDouble(kVar, -1, 0, 1), 1.0);  // the bounds are in range
}

class GetDoubleErrorTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GetDoubleErrorTest, RejectsOutOfRangeAndUnparsableNamingTheVariableAndRange) {
  const std::string message = ConfigErrorOf([&] { With(GetParam()).GetDouble(kVar, 0, 0, 1); });
  EXPECT_THAT(message, HasSubstr(kVar));
  EXPECT_THAT(message, HasSubstr("'" + GetParam() + "'"));
  EXPECT_THAT(message, HasSubstr("between 0 and 1"));
}

INSTANTIATE_TEST_SUITE_P(Garbage, GetDoubleErrorTest,
                         ::testing::Values("-0.1", "1.5", "abc", "0.5x", "inf", "nan"));

// ---- Get / GetString / FromProcess --------------------------------------------

TEST(EnvironmentTest, EmptyIsSetForGetButNotForGetString) {
  const Environment env = With("");
  ASSERT_TRUE(env.Get(kVar).has_value());
  EXPECT_EQ(*env.Get(kVar), "");
  EXPECT_EQ(env.GetString(kVar, "fallback"), "fallback");
  EXPECT_FALSE(env.Get("TANDEM_TEST_UNSET").has_value());
  EXPECT_EQ(With("value").GetString(kVar, "fallback"), "value");
}

TEST(EnvironmentTest, FromProcessCapturesTheEnvironmentOnce) {
  ASSERT_EQ(setenv("TANDEM_TEST_FROM_PROCESS", "a=b=c", 1), 0);
  const Environment env = Environment::FromProcess();
  ASSERT_EQ(unsetenv("TANDEM_TEST_FROM_PROCESS"), 0);
  // Values may contain '='; only the first one separates the name.
  EXPECT_EQ(env.Get("TANDEM_TEST_FROM_PROCESS"), std::optional<std::string>("a=b=c"));
  // A snapshot: later changes to the process do not show.
  EXPECT_FALSE(Environment::FromProcess().Get("TANDEM_TEST_FROM_PROCESS").has_value());
  EXPECT_EQ(env.vars().count("TANDEM_TEST_FROM_PROCESS"), 1u);
}

}  // namespace
}  // namespace tandem::base
