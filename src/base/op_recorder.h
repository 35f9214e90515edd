// What one kind of operation cost: a latency histogram per operation name
// (label `op`) and, when a timeline is on, one span per operation on the
// track of its name. The kv client records each request to a server
// (push, pull, ...), the collectives each operation (allreduce, ...);
// docs/metrics.md lists the metrics.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "base/clock.h"
#include "base/stats.h"
#include "base/timeline.h"

namespace tandem::base {

/// Thread-safety: Record from any thread; the first record of an operation
/// name takes a lock to find its histogram, later ones take it briefly.
class OpRecorder {
 public:
  /// `histogram` is the family name (e.g. "tandem_kv_request_duration_seconds");
  /// `timeline` may be null (no trace). `stats` and `timeline` are borrowed.
  OpRecorder(StatsRegistry& stats, std::string histogram, std::string help, Timeline* timeline);

  /// One operation `op` ran from `start` to `end`; `args` go to the trace
  /// (bytes, key, peer).
  void Record(std::string_view op, SteadyTime start, SteadyTime end,
              const std::map<std::string, std::string>& args = {});

  bool tracing() const { return timeline_ != nullptr; }

 private:
  StatsRegistry& stats_;
  const std::string name_;
  const std::string help_;
  Timeline* timeline_;
  std::mutex mu_;
  std::map<std::string, Histogram*, std::less<>> by_op_;  // guarded by mu_
};

}  // namespace tandem::base
