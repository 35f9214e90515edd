// Counters, gauges and histograms that every layer updates on its hot paths
// and that src/metrics/ exports (Prometheus text format) without the layers
// knowing of it: a process builds one StatsRegistry and passes it down; a
// component asks it once for the metrics it updates and keeps the
// references.
//
// Names and units follow Prometheus' conventions (docs/metrics.md):
// snake_case, a `tandem_` prefix, `_total` for counters, base units
// (`_bytes`, `_seconds`).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tandem::base {

/// Label names to values, e.g. {{"op", "push"}, {"peer_role", "server"}}.
using StatLabels = std::map<std::string, std::string>;

/// A count that only grows. Thread-safety: any thread; lock-free.
class Counter {
 public:
  void Add(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

/// A value that goes up and down (a queue depth, an age). Thread-safety: any
/// thread; lock-free.
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double d) { value_.fetch_add(d, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

/// A distribution over fixed buckets (Prometheus' cumulative `le` buckets).
/// Thread-safety: Observe from any thread, lock-free; Read may run
/// concurrently and sees each bucket at some moment (counts never go down).
class Histogram {
 public:
  /// `upper_bounds` strictly increasing; +Inf is implicit. Throws
  /// InvalidArgument otherwise.
  explicit Histogram(std::vector<double> upper_bounds);

  /// Records one value.
  void Observe(double value);

  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> cumulative;  ///< one per bound, then +Inf (= count)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Read() const;

  /// Buckets for latencies: 10 µs to 100 s, about 4 per decade.
  static std::vector<double> LatencyBuckets();

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1, not cumulative
  std::atomic<double> sum_{0.0};
};

/// The metrics of one process. Thread-safety: every method may be called
/// from any thread; asking for a metric takes a lock (do it once, keep the
/// reference), updating one does not. References stay valid for the
/// registry's life.
class StatsRegistry {
 public:
  enum class Kind { kCounter, kGauge, kHistogram };

  /// The counter `name` with `labels`, created on first request. Throws
  /// InvalidArgument when `name` is not a valid metric name or was
  /// registered before as another kind or with another help text.
  Counter& GetCounter(const std::string& name, const std::string& help,
                      const StatLabels& labels = {});
  Gauge& GetGauge(const std::string& name, const std::string& help, const StatLabels& labels = {});
  /// `upper_bounds` apply when the histogram is first created.
  Histogram& GetHistogram(const std::string& name, const std::string& help,
                          const StatLabels& labels = {},
                          std::vector<double> upper_bounds = Histogram::LatencyBuckets());

  /// Labels every metric carries (role, rank), set once the node knows them.
  void SetConstantLabels(StatLabels labels);
  StatLabels constant_labels() const;

  /// One family per name, for an exporter.
  struct Series {
    StatLabels labels;
    Counter* counter = nullptr;
    Gauge* gauge = nullptr;
    Histogram* histogram = nullptr;
  };
  struct Family {
    std::string name;
    std::string help;
    Kind kind = Kind::kCounter;
    std::vector<Series> series;
  };
  /// Every family, sorted by name; the pointers stay valid for the
  /// registry's life.
  std::vector<Family> Families() const;

  /// Adds `fn`, which an exporter runs (Refresh) before it reads: for values
  /// cheaper to compute on demand than on every event (heartbeat ages, the
  /// reliable layer's counters). `fn` may ask for and update metrics; what it
  /// touches must outlive the exporter.
  void AddRefresher(std::function<void()> fn);
  /// Runs every refresher, one Refresh at a time. Any thread.
  void Refresh() const;

 private:
  Family& FamilyFor(const std::string& name, const std::string& help, Kind kind);  // requires mu_

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
  std::deque<Counter> counters_;
  std::deque<Gauge> gauges_;
  std::deque<Histogram> histograms_;
  StatLabels constant_labels_;
  mutable std::mutex refresh_mu_;                  // held while refreshers run; never with mu_
  std::vector<std::function<void()>> refreshers_;  // guarded by refresh_mu_
};

}  // namespace tandem::base
