#include "metrics/prometheus_endpoint.h"

#include <fmt/format.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include "tandem/error.h"

namespace tandem::metrics {
namespace {

std::vector<prometheus::ClientMetric::Label> ToLabels(const base::StatLabels& constant,
                                                      const base::StatLabels& own) {
  base::StatLabels all = constant;
  for (const auto& [k, v] : own) all[k] = v;
  std::vector<prometheus::ClientMetric::Label> out;
  for (const auto& [k, v] : all) out.push_back({k, v});
  return out;
}

std::vector<prometheus::MetricFamily> Convert(const base::StatsRegistry& registry) {
  registry.Refresh();
  base::StatLabels constant = registry.constant_labels();
  std::vector<prometheus::MetricFamily> out;
  for (const auto& f : registry.Families()) {
    prometheus::MetricFamily pf;
    pf.name = f.name;
    pf.help = f.help;
    for (const auto& s : f.series) {
      prometheus::ClientMetric m;
      m.label = ToLabels(constant, s.labels);
      switch (f.kind) {
        case base::StatsRegistry::Kind::kCounter:
          pf.type = prometheus::MetricType::Counter;
          m.counter.value = static_cast<double>(s.counter->value());
          break;
        case base::StatsRegistry::Kind::kGauge:
          pf.type = prometheus::MetricType::Gauge;
          m.gauge.value = s.gauge->value();
          break;
        case base::StatsRegistry::Kind::kHistogram: {
          pf.type = prometheus::MetricType::Histogram;
          auto snap = s.histogram->Read();
          m.histogram.sample_count = snap.count;
          m.histogram.sample_sum = snap.sum;
          for (size_t i = 0; i < snap.upper_bounds.size(); ++i) {
            m.histogram.bucket.push_back({snap.cumulative[i], snap.upper_bounds[i]});
          }
          m.histogram.bucket.push_back({snap.count, std::numeric_limits<double>::infinity()});
          break;
        }
      }
      pf.metric.push_back(std::move(m));
    }
    out.push_back(std::move(pf));
  }
  return out;
}

}  // namespace

class PrometheusEndpoint::Collector : public prometheus::Collectable {
 public:
  explicit Collector(const base::StatsRegistry& registry) : registry_(registry) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return Convert(registry_); }

 private:
  const base::StatsRegistry& registry_;
};

PrometheusEndpoint::PrometheusEndpoint(const base::StatsRegistry& registry,
                                       const std::string& address, uint16_t port)
    : collector_(std::make_shared<Collector>(registry)) {
  std::string bind = address.find(':') != std::string::npos ? fmt::format("[{}]:{}", address, port)
                                                            : fmt::format("{}:{}", address, port);
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(bind, /*num_threads=*/1);
  } catch (const std::exception& e) {
    throw IoError(fmt::format("cannot serve metrics on {}: {}", bind, e.what()));
  }
  exposer_->RegisterCollectable(collector_);
  auto ports = exposer_->GetListeningPorts();
  if (ports.empty()) throw IoError(fmt::format("cannot serve metrics on {}: no port bound", bind));
  port_ = static_cast<uint16_t>(ports.front());
}

PrometheusEndpoint::~PrometheusEndpoint() = default;

std::string RenderPrometheusText(const base::StatsRegistry& registry) {
  prometheus::TextSerializer serializer;
  return serializer.Serialize(Convert(registry));
}

}  // namespace tandem::metrics
