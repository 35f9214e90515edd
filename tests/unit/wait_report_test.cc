// base::WaitReport on a manual clock: when a long wait's lines fall due and
// what they say.
#include "base/wait_report.h"

#include <gtest/gtest.h>

#include <regex>

namespace tandem::base {
namespace {

using std::chrono::milliseconds;

struct DueCase {
  const char* name;
  int64_t interval_ms;
  std::vector<int64_t> advances_ms;  // the clock moves by each, then TakeDue
  std::vector<bool> due;             // what TakeDue says after each
  int64_t next_in_ms;                // NextIn at the end
};

class WaitReportDueTest : public ::testing::TestWithParam<DueCase> {};

TEST_P(WaitReportDueTest, LinesFallDueOncePerInterval) {
  const DueCase& c = GetParam();
  ManualClock clock;
  WaitReport report(clock, milliseconds(c.interval_ms));
  ASSERT_EQ(c.advances_ms.size(), c.due.size());
  int64_t waited = 0;
  for (size_t i = 0; i < c.advances_ms.size(); ++i) {
    clock.Advance(milliseconds(c.advances_ms[i]));
    waited += c.advances_ms[i];
    EXPECT_EQ(report.TakeDue(), c.due[i]) << "after " << waited << " ms";
    EXPECT_EQ(report.Waited(), milliseconds(waited));
  }
  EXPECT_EQ(report.NextIn(), milliseconds(c.next_in_ms));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, WaitReportDueTest,
    ::testing::Values(
        DueCase{"NotBeforeTheInterval", 30000, {29999}, {false}, 1},
        DueCase{"AtTheInterval", 30000, {30000}, {true}, 30000},
        DueCase{"OncePerInterval", 1000, {1000, 1, 998, 1}, {true, false, false, true}, 1000},
        // A waiter busy for 3.5 intervals gets one line, not four.
        DueCase{"MissedLinesAreNotMadeUp", 1000, {3500, 0, 500}, {true, false, true}, 1000},
        // An interval of zero would log in a loop; it is taken as 1 ms.
        DueCase{"ZeroIntervalIsOneMillisecond", 0, {0, 1, 1}, {false, true, true}, 1}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(WaitReportTest, LastedSaysHowLongAndSinceWhenInUtc) {
  ManualClock clock;
  WaitReport report(clock, milliseconds(1000));
  clock.Advance(std::chrono::seconds(31));
  EXPECT_TRUE(std::regex_match(
      report.Lasted(), std::regex(R"(after 31 s \(since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\))")))
      << report.Lasted();
}

}  // namespace
}  // namespace tandem::base
