// Samples a value (a gauge, say) on a thread of its own until stopped and
// remembers the largest it saw: for tests that check a bound holds while
// other threads work.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

namespace tandem::testing {

/// Thread-safety: constructed, stopped and destroyed by one thread; `read`
/// runs on the sampler's own thread and must be safe to call from it.
class PeakSampler {
 public:
  /// Starts sampling `read()` every `period`.
  explicit PeakSampler(std::function<double()> read,
                       std::chrono::microseconds period = std::chrono::microseconds(50))
      : read_(std::move(read)), thread_([this, period] {
          while (!stop_.load()) {
            peak_ = std::max(peak_.load(), read_());
            std::this_thread::sleep_for(period);
          }
        }) {}
  ~PeakSampler() { Stop(); }
  PeakSampler(const PeakSampler&) = delete;
  PeakSampler& operator=(const PeakSampler&) = delete;

  /// Stops sampling (idempotent) and returns the largest value seen.
  double Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return peak_;
  }

 private:
  std::function<double()> read_;
  std::atomic<bool> stop_{false};
  std::atomic<double> peak_{0};
  std::thread thread_;
};

}  // namespace tandem::testing
