#include "base/wait_report.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>

namespace tandem::base {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

WaitReport::WaitReport(const Clock& clock, milliseconds interval)
    : clock_(clock),
      interval_(std::max(interval, milliseconds(1))),
      started_(clock.Now()),
      started_utc_(std::chrono::system_clock::now()),
      due_(started_ + interval_) {}

milliseconds WaitReport::NextIn() const {
  const auto now = clock_.Now();
  if (now >= due_) return milliseconds(0);
  // Rounded up, so that a waiter woken at NextIn finds the line due.
  return std::chrono::ceil<milliseconds>(due_ - now);
}

bool WaitReport::TakeDue() {
  const auto now = clock_.Now();
  if (now < due_) return false;
  while (due_ <= now) due_ += interval_;
  return true;
}

milliseconds WaitReport::Waited() const {
  return duration_cast<milliseconds>(clock_.Now() - started_);
}

std::string WaitReport::Lasted() const {
  return fmt::format("after {:.0f} s (since {:%Y-%m-%dT%H:%M:%S}Z)",
                     std::chrono::duration<double>(Waited()).count(),
                     std::chrono::floor<std::chrono::seconds>(started_utc_));
}

}  // namespace tandem::base
