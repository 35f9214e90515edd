#include "base/stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tandem/error.h"

namespace tandem::base {

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]) || (i > 0 && bounds_[i] <= bounds_[i - 1])) {
      throw InvalidArgument(fmt::format(
          "histogram bucket bounds must be finite and strictly increasing; bound {} is {}", i,
          bounds_[i]));
    }
  }
  buckets_ = std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1);
}

void Histogram::Observe(double value) {
  size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) -
                                 bounds_.begin());
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  s.upper_bounds = bounds_;
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(running);
  }
  s.count = running;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

std::vector<double> Histogram::LatencyBuckets() {
  std::vector<double> b;
  for (double decade = 1e-5; decade < 100; decade *= 10) {
    for (double m : {1.0, 2.5, 5.0}) b.push_back(decade * m);
  }
  b.push_back(100);
  return b;
}

namespace {

bool ValidName(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

const char* KindName(StatsRegistry::Kind k) {
  switch (k) {
    case StatsRegistry::Kind::kCounter:
      return "counter";
    case StatsRegistry::Kind::kGauge:
      return "gauge";
    case StatsRegistry::Kind::kHistogram:
      return "histogram";
  }
  return "?";
}

}  // namespace

StatsRegistry::Family& StatsRegistry::FamilyFor(const std::string& name, const std::string& help,
                                                Kind kind) {
  if (!ValidName(name)) {
    throw InvalidArgument(
        fmt::format("'{}' is not a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)", name));
  }
  auto [it, inserted] = families_.try_emplace(name);
  Family& f = it->second;
  if (inserted) {
    f.name = name;
    f.help = help;
    f.kind = kind;
  } else if (f.kind != kind || f.help != help) {
    throw InvalidArgument(
        fmt::format("metric {} was registered as a {} (\"{}\"), now asked as a {} "
                    "(\"{}\")",
                    name, KindName(f.kind), f.help, KindName(kind), help));
  }
  return f;
}

Counter& StatsRegistry::GetCounter(const std::string& name, const std::string& help,
                                   const StatLabels& labels) {
  std::lock_guard lock(mu_);
  Family& f = FamilyFor(name, help, Kind::kCounter);
  for (auto& s : f.series) {
    if (s.labels == labels) return *s.counter;
  }
  Counter& c = counters_.emplace_back();
  f.series.push_back({labels, &c, nullptr, nullptr});
  return c;
}

Gauge& StatsRegistry::GetGauge(const std::string& name, const std::string& help,
                               const StatLabels& labels) {
  std::lock_guard lock(mu_);
  Family& f = FamilyFor(name, help, Kind::kGauge);
  for (auto& s : f.series) {
    if (s.labels == labels) return *s.gauge;
  }
  Gauge& g = gauges_.emplace_back();
  f.series.push_back({labels, nullptr, &g, nullptr});
  return g;
}

Histogram& StatsRegistry::GetHistogram(const std::string& name, const std::string& help,
                                       const StatLabels& labels, std::vector<double> upper_bounds) {
  std::lock_guard lock(mu_);
  Family& f = FamilyFor(name, help, Kind::kHistogram);
  for (auto& s : f.series) {
    if (s.labels == labels) return *s.histogram;
  }
  Histogram& h = histograms_.emplace_back(std::move(upper_bounds));
  f.series.push_back({labels, nullptr, nullptr, &h});
  return h;
}

void StatsRegistry::SetConstantLabels(StatLabels labels) {
  std::lock_guard lock(mu_);
  constant_labels_ = std::move(labels);
}

StatLabels StatsRegistry::constant_labels() const {
  std::lock_guard lock(mu_);
  return constant_labels_;
}

std::vector<StatsRegistry::Family> StatsRegistry::Families() const {
  std::lock_guard lock(mu_);
  std::vector<Family> out;
  out.reserve(families_.size());
  for (const auto& [name, f] : families_) out.push_back(f);
  return out;
}

void StatsRegistry::AddRefresher(std::function<void()> fn) {
  std::lock_guard lock(refresh_mu_);
  refreshers_.push_back(std::move(fn));
}

void StatsRegistry::Refresh() const {
  std::lock_guard lock(refresh_mu_);
  for (const auto& fn : refreshers_) fn();
}

}  // namespace tandem::base
