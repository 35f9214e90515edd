// The opt-in Prometheus endpoint of a process: GET /metrics answers with
// every metric of a StatsRegistry in Prometheus' text format 0.0.4, served
// by prometheus-cpp's exposer. docs/metrics.md lists the metrics.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/stats.h"

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace tandem::metrics {

/// Thread-safety: the exposer's own threads read the registry (lock-free
/// reads of the metrics); construction and destruction on one thread.
class PrometheusEndpoint {
 public:
  /// Serves `registry` (which must outlive this) on `address`:`port` (port 0
  /// picks a free one). Throws IoError naming the address when it cannot
  /// bind.
  PrometheusEndpoint(const base::StatsRegistry& registry, const std::string& address,
                     uint16_t port);
  ~PrometheusEndpoint();
  PrometheusEndpoint(const PrometheusEndpoint&) = delete;
  PrometheusEndpoint& operator=(const PrometheusEndpoint&) = delete;

  /// The port actually bound.
  uint16_t port() const { return port_; }

 private:
  class Collector;
  std::shared_ptr<Collector> collector_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  uint16_t port_ = 0;
};

/// The text a scrape returns, without a server (for tests and for writing
/// the metrics to a file at exit).
std::string RenderPrometheusText(const base::StatsRegistry& registry);

}  // namespace tandem::metrics
