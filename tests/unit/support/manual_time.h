// Driving time by hand in a test (docs/reliability.md, "Testing time"): the
// code under test waits on a base::ManualClock, whose waits look at the
// clock about every millisecond of real time (base/clock.h); the test moves
// the clock forward and waits, in real time, for what it expects to happen.
//
// An outcome a test asserts must not depend on how the steps fall between
// the threads' looks at the clock: either it follows from the clock's time
// alone (a count of resends, a report made once: AdvanceUntil), or the test
// waits after each step until the threads reacted (WaitFor on what they
// do), and stops the clock where the outcome must be decided.
#pragma once

#include <chrono>
#include <thread>

#include "base/clock.h"

namespace tandem::testing {

/// How long a test waits in real time for something that should happen at
/// once: only a hang reaches it.
inline constexpr std::chrono::seconds kRealPatience{60};

/// Waits in real time until `done()` holds, looking every millisecond;
/// returns done(), false after `patience`.
template <typename Done>
bool WaitFor(Done done, std::chrono::milliseconds patience = kRealPatience) {
  const auto give_up = std::chrono::steady_clock::now() + patience;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= give_up) return done();
    std::this_thread::sleep_for(base::kManualClockPoll);
  }
  return true;
}

/// Advances `clock` by `step` at a time until `done()` holds, with a moment
/// of real time after each step for the threads polling the clock to look
/// at it. For outcomes that follow from the clock's time alone (a count of
/// resends, a report made once), however the steps fall between the
/// threads' looks. Returns done(); false after `patience` of real time.
template <typename Done>
bool AdvanceUntil(base::ManualClock& clock, std::chrono::nanoseconds step, Done done,
                  std::chrono::milliseconds patience = kRealPatience) {
  const auto give_up = std::chrono::steady_clock::now() + patience;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= give_up) return done();
    clock.Advance(step);
    std::this_thread::sleep_for(base::kManualClockPoll);
  }
  return true;
}

}  // namespace tandem::testing
