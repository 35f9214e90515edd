// Time as a seam: code that waits or times out asks a Clock, so tests can
// drive time by hand.
#pragma once

#include <atomic>
#include <chrono>

namespace tandem::base {

using SteadyTime = std::chrono::steady_clock::time_point;

/// Thread-safety: implementations may be called from any thread.
class Clock {
 public:
  virtual ~Clock() = default;
  /// The current time on a monotonic clock.
  virtual SteadyTime Now() const = 0;
};

/// The real monotonic clock.
class SteadyClock final : public Clock {
 public:
  SteadyTime Now() const override { return std::chrono::steady_clock::now(); }
};

/// A clock that moves only when told to (for tests).
class ManualClock final : public Clock {
 public:
  SteadyTime Now() const override {
    return SteadyTime(std::chrono::steady_clock::duration(ticks_.load()));
  }
  /// Moves time forward by `d`.
  void Advance(std::chrono::steady_clock::duration d) { ticks_ += d.count(); }

 private:
  std::atomic<std::chrono::steady_clock::rep> ticks_{
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::hours(1))
          .count()};
};

}  // namespace tandem::base
