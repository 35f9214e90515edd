// What a long wait says while it goes on (docs/reliability.md, "No silent
// waits"): a thread that blocks for something another process owes it logs,
// every interval (TANDEM_WAIT_REPORT_SECONDS, 30 s by default), one line
// naming what it waits for, how long it has waited and since when.
//
// A WaitReport is the bookkeeping of one such wait: the waiter sleeps at most
// until the next line is due (NextIn), then asks whether it is (TakeDue) and
// words the line with Lasted. The time comes from a base::Clock, so tests
// drive it by hand.
#pragma once

#include <chrono>
#include <string>

#include "base/clock.h"

namespace tandem::base {

/// TANDEM_WAIT_REPORT_SECONDS' default: how often a long wait logs a line.
inline constexpr std::chrono::milliseconds kDefaultWaitReportInterval{30000};

/// Thread-safety: one waiting thread owns it.
class WaitReport {
 public:
  /// Starts the wait now on `clock` (which must outlive it). `interval` is
  /// the time between lines; one of zero or less is taken as 1 ms.
  WaitReport(const Clock& clock, std::chrono::milliseconds interval);

  /// How long the waiter may sleep from now before the next line is due
  /// (zero when it is due already).
  std::chrono::milliseconds NextIn() const;
  /// Whether a line is due now; when it is, the following one is due one
  /// interval later (lines missed while the waiter was busy are not made up).
  bool TakeDue();
  /// How long the wait has lasted so far.
  std::chrono::milliseconds Waited() const;
  /// The wait's length and start for a line: "after 31 s (since
  /// 2026-11-27T04:40:12Z)".
  std::string Lasted() const;

 private:
  const Clock& clock_;
  const std::chrono::milliseconds interval_;
  const SteadyTime started_;
  const std::chrono::system_clock::time_point started_utc_;
  SteadyTime due_;
};

}  // namespace tandem::base
