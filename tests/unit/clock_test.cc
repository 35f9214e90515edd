// The clock seam (base/clock.h): how long a wait toward a clock deadline may
// sleep on each clock, and base::WaitUntil ending on its predicate, on a
// ManualClock advanced past the deadline by another thread, and on the
// real clock at its deadline.
#include "base/clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace tandem::base {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

struct BoundCase {
  const char* name;
  int64_t deadline_in_ms;  // from Now(); negative: already passed
  int64_t manual_bound_ns;
};

class ManualSleepBoundTest : public ::testing::TestWithParam<BoundCase> {};

TEST_P(ManualSleepBoundTest, IsAtMostOnePollAndZeroOnceReached) {
  const BoundCase& c = GetParam();
  ManualClock clock;
  EXPECT_EQ(clock.SleepBound(clock.Now() + milliseconds(c.deadline_in_ms)),
            nanoseconds(c.manual_bound_ns));
}

INSTANTIATE_TEST_SUITE_P(
    Deadlines, ManualSleepBoundTest,
    ::testing::Values(BoundCase{"Passed", -5, 0}, BoundCase{"Now", 0, 0},
                      BoundCase{"OnePollAway", 1, nanoseconds(kManualClockPoll).count()},
                      BoundCase{"AnHourAway", 3600000, nanoseconds(kManualClockPoll).count()}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(ClockTest, ManualSleepBoundOfAFarDeadlineIsOnePoll) {
  ManualClock clock;
  EXPECT_EQ(clock.SleepBound(SteadyTime::max()), nanoseconds(kManualClockPoll));
  clock.Advance(std::chrono::microseconds(250));
  EXPECT_EQ(clock.SleepBound(clock.Now() + std::chrono::microseconds(300)),
            std::chrono::microseconds(300));
}

TEST(ClockTest, SteadySleepBoundIsTheWholeRemainingTime) {
  SteadyClock clock;
  const nanoseconds bound = clock.SleepBound(clock.Now() + std::chrono::seconds(30));
  EXPECT_LE(bound, std::chrono::seconds(30));
  EXPECT_GT(bound, std::chrono::seconds(29));
  EXPECT_EQ(clock.SleepBound(clock.Now() - milliseconds(1)), nanoseconds(0));
}

// A waiter toward a deadline `wait_ms` ahead on a ManualClock; the test
// advances the clock `steps` times by `step_ms`.
struct ManualWaitCase {
  const char* name;
  int64_t wait_ms;
  int64_t step_ms;
  int steps;
  bool expect_timed_out;
};

class ManualWaitUntilTest : public ::testing::TestWithParam<ManualWaitCase> {};

TEST_P(ManualWaitUntilTest, EndsWhenTheClockPassesTheDeadlineAndNotBefore) {
  const ManualWaitCase& c = GetParam();
  ManualClock clock;
  std::mutex mu;
  std::condition_variable cv;
  bool flag = false;
  std::atomic<bool> returned{false};
  bool result = true;
  const SteadyTime deadline = clock.Now() + milliseconds(c.wait_ms);
  std::thread waiter([&] {
    std::unique_lock lock(mu);
    result = WaitUntil(cv, lock, clock, deadline, [&] { return flag; });
    returned = true;
  });
  for (int i = 0; i < c.steps; ++i) {
    clock.Advance(milliseconds(c.step_ms));
    std::this_thread::sleep_for(kManualClockPoll);
  }
  if (!c.expect_timed_out) {
    // The deadline was not reached: the waiter still waits, however long
    // in real time, until the predicate holds.
    std::this_thread::sleep_for(milliseconds(20));
    EXPECT_FALSE(returned.load());
    {
      std::lock_guard lock(mu);
      flag = true;
    }
    cv.notify_all();
  }
  waiter.join();
  EXPECT_EQ(result, !c.expect_timed_out);
}

INSTANTIATE_TEST_SUITE_P(Steps, ManualWaitUntilTest,
                         ::testing::Values(ManualWaitCase{"OneStepPast", 30000, 30001, 1, true},
                                           ManualWaitCase{"ExactlyAtTheDeadline", 30000, 30000, 1,
                                                          true},
                                           ManualWaitCase{"ManySmallSteps", 100, 10, 10, true},
                                           ManualWaitCase{"ShortOfTheDeadline", 100, 10, 9, false},
                                           ManualWaitCase{"NoStep", 1, 0, 0, false}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(ClockTest, WaitUntilOnTheSteadyClockEndsAtItsDeadline) {
  SteadyClock clock;
  std::mutex mu;
  std::condition_variable cv;
  std::unique_lock lock(mu);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(WaitUntil(cv, lock, clock, clock.Now() + milliseconds(30), [] { return false; }));
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(30));
  EXPECT_TRUE(WaitUntil(cv, lock, clock, SteadyTime::max(), [] { return true; }));
}

}  // namespace
}  // namespace tandem::base
