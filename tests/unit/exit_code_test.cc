#include "base/exit_code.h"

#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>

#include "tandem/error.h"

namespace tandem::base {
namespace {

struct ErrorCase {
  const char* name;
  std::function<void()> raise;
  int code;
  bool retryable;
};

class ExitCodeOf : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ExitCodeOf, MapsTheErrorClass) {
  const ErrorCase& c = GetParam();
  try {
    c.raise();
    FAIL() << "nothing thrown";
  } catch (const std::exception& e) {
    EXPECT_EQ(ExitCodeFor(e), c.code);
    EXPECT_EQ(IsRetryableExitCode(ExitCodeFor(e)), c.retryable);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Errors, ExitCodeOf,
    ::testing::Values(ErrorCase{"PeerLost", [] { throw PeerLost("worker 3 lost"); }, 200, true},
                      ErrorCase{"Timeout", [] { throw Timeout("barrier"); }, 201, true},
                      ErrorCase{"IoError", [] { throw IoError("connect"); }, 202, true},
                      ErrorCase{"AuthFailed", [] { throw AuthFailed("secret"); }, 77, false},
                      ErrorCase{"ProtocolError", [] { throw ProtocolError("magic"); }, 76, false},
                      ErrorCase{"ConfigError", [] { throw ConfigError("DMLC_ROLE"); }, 78, false},
                      ErrorCase{"InvalidArgument", [] { throw InvalidArgument("shape"); }, 78,
                                false},
                      ErrorCase{"Error", [] { throw Error("other"); }, 1, false},
                      ErrorCase{"StdError", [] { throw std::runtime_error("std"); }, 1, false}),
    [](const auto& test) { return std::string(test.param.name); });

TEST(ExitCode, SignalsAreRetryableAndPermanentCodesAreNot) {
  EXPECT_FALSE(IsRetryableExitCode(0));
  EXPECT_TRUE(IsRetryableExitCode(128 + 9));   // SIGKILL: OOM killer, eviction
  EXPECT_TRUE(IsRetryableExitCode(128 + 15));  // SIGTERM: a drained node
  EXPECT_TRUE(IsRetryableExitCode(255));
  int previous = 0;
  for (int code : PermanentExitCodes()) {
    EXPECT_GT(code, previous) << "ascending";
    EXPECT_LT(code, 128);
    EXPECT_FALSE(IsRetryableExitCode(code)) << code;
    previous = code;
  }
  EXPECT_EQ(PermanentExitCodes().size(), 7u);
}

}  // namespace
}  // namespace tandem::base
