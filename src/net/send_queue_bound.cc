#include "net/send_queue_bound.h"

#include <fmt/format.h>

#include <utility>

#include "tandem/error.h"

namespace tandem::net {

SendQueueBound SendQueueBound::FromEnvironment(const base::Environment& env) {
  SendQueueBound b;
  const int64_t bytes = env.GetInt("TANDEM_MAX_INFLIGHT_BYTES",
                                   static_cast<int64_t>(b.max_queued_bytes), 0, INT64_MAX);
  if (bytes != 0 && bytes < (int64_t{64} << 10)) {
    throw ConfigError(fmt::format(
        "TANDEM_MAX_INFLIGHT_BYTES: expected 0 (no bound) or at least 65536 bytes, got {}", bytes));
  }
  b.max_queued_bytes = static_cast<uint64_t>(bytes);
  b.wait_timeout = env.GetSeconds("TANDEM_SEND_WAIT_TIMEOUT", b.wait_timeout);
  return b;
}

SendQueueMeter::SendQueueMeter(base::StatsRegistry& stats, TrafficLabels labels)
    : role_of_(std::move(labels.peer_role_of)), series_(labels.peer_roles.size()) {
  for (size_t r = 0; r < series_.size(); ++r) {
    const base::StatLabels role_label = {{"peer_role", labels.peer_roles[r]}};
    series_[r].queued = &stats.GetGauge(
        "tandem_send_queued_bytes",
        "Bytes queued in this process's connections and not yet written, by the peer's role.",
        role_label);
    series_[r].waits = &stats.GetCounter(
        "tandem_send_queue_waits_total",
        "Sends that waited for room in a full send queue (TANDEM_MAX_INFLIGHT_BYTES).", role_label);
    series_[r].timeouts = &stats.GetCounter(
        "tandem_send_queue_wait_timeouts_total",
        "Sends that gave up waiting for room in a full send queue (TANDEM_SEND_WAIT_TIMEOUT).",
        role_label);
  }
}

int SendQueueMeter::RoleOf(int recipient) const { return static_cast<int>(role_of_(recipient)); }

void SendQueueMeter::AddQueued(int role, int64_t delta) {
  series_[static_cast<size_t>(role)].queued->Add(static_cast<double>(delta));
}

void SendQueueMeter::CountWait(int role) { series_[static_cast<size_t>(role)].waits->Add(1); }

void SendQueueMeter::CountTimeout(int role) { series_[static_cast<size_t>(role)].timeouts->Add(1); }

}  // namespace tandem::net
