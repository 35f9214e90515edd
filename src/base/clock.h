// Time as a seam: code that waits or times out asks a Clock, so tests can
// drive time by hand.
//
// Which waits go through the clock: every time that decides an outcome of a
// protocol, i.e. heartbeats and the time-outs built on them, the start and
// barrier time-outs, resend deadlines, stall reports, and the long-wait
// reports (WaitReport). Which do not: the pace of a loop that only batches
// work (the framework engine's cycle) and the grace periods a process grants
// before it goes away (a transport's linger for acknowledgements, the
// scheduler's wait for every node to leave); those stay in real time, so
// that a test on a ManualClock never hangs in its teardown.
//
// A thread that waits for clock time T sleeps on a condition variable, which
// only real time wakes. So it sleeps at most Clock::SleepBound(T) of real
// time and then looks at Now() again (WaitUntil below does that loop): on
// the SteadyClock the bound is the whole remaining time, so nothing changes;
// on a ManualClock it is kManualClockPoll, so a wait notices within about a
// millisecond that a test advanced the clock past its deadline.
// docs/reliability.md ("Testing time") shows how the unit tests use it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace tandem::base {

using SteadyTime = std::chrono::steady_clock::time_point;

/// Thread-safety: implementations may be called from any thread.
class Clock {
 public:
  virtual ~Clock() = default;
  /// The current time on a monotonic clock.
  virtual SteadyTime Now() const = 0;
  /// The longest real time a thread waiting for this clock to reach
  /// `deadline` may sleep before it looks at Now() again; zero once the
  /// deadline is reached.
  virtual std::chrono::nanoseconds SleepBound(SteadyTime deadline) const = 0;
};

/// The real monotonic clock.
class SteadyClock final : public Clock {
 public:
  SteadyTime Now() const override { return std::chrono::steady_clock::now(); }
  /// The whole time left until `deadline`.
  std::chrono::nanoseconds SleepBound(SteadyTime deadline) const override {
    return std::max(std::chrono::nanoseconds(0), deadline - Now());
  }
};

/// How often a wait on a ManualClock looks at it (real time).
inline constexpr std::chrono::milliseconds kManualClockPoll{1};

/// A clock that moves only when told to (for tests). Starts at one hour
/// past the steady clock's epoch, so that "an hour ago" is still a valid
/// time point.
class ManualClock final : public Clock {
 public:
  SteadyTime Now() const override {
    return SteadyTime(std::chrono::steady_clock::duration(ticks_.load()));
  }
  /// kManualClockPoll, or less when the deadline is nearer; zero once it
  /// is reached.
  std::chrono::nanoseconds SleepBound(SteadyTime deadline) const override {
    return std::clamp<std::chrono::nanoseconds>(deadline - Now(), std::chrono::nanoseconds(0),
                                                kManualClockPoll);
  }
  /// Moves time forward by `d`. Any thread.
  void Advance(std::chrono::steady_clock::duration d) { ticks_ += d.count(); }

 private:
  std::atomic<std::chrono::steady_clock::rep> ticks_{
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::hours(1))
          .count()};
};

/// Waits on `cv`, with `lock` (on the mutex guarding what `done` reads)
/// held, until `done()` holds or `clock` reaches `deadline`, as
/// std::condition_variable::wait_until does on the real clock. Returns
/// done(). A deadline of SteadyTime::max() waits for `done` alone.
template <typename Predicate>
bool WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, const Clock& clock,
               SteadyTime deadline, Predicate done) {
  // One sleep is cut at a day, so that wait_for's own arithmetic on the
  // real clock cannot overflow for a far deadline; the loop sleeps again.
  constexpr std::chrono::nanoseconds kLongestSleep = std::chrono::hours(24);
  while (!done()) {
    const std::chrono::nanoseconds bound = clock.SleepBound(deadline);
    if (bound <= std::chrono::nanoseconds(0)) return done();
    cv.wait_for(lock, std::min(bound, kLongestSleep));
  }
  return true;
}

}  // namespace tandem::base
