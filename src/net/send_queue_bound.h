// Back-pressure on a connection's send queue (docs/transport.md,
// "Back-pressure"): how many bytes a TCP connection may hold queued and not
// yet written, how long a sender waits for room, and the metrics that show
// it (docs/metrics.md).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "base/environment.h"
#include "base/stats.h"
#include "net/metered_transport.h"

namespace tandem::net {

class SendQueueMeter;

/// The bound every connection of a TcpTransport applies to its send queue.
/// A value type.
struct SendQueueBound {
  /// TANDEM_MAX_INFLIGHT_BYTES: bytes (64-byte header, metadata and payload
  /// of every message not yet completely written) a connection may hold
  /// queued; a sender that would exceed it waits. A message larger than the
  /// bound is accepted when the queue is empty. 0: no bound.
  uint64_t max_queued_bytes = uint64_t{64} << 20;
  /// TANDEM_SEND_WAIT_TIMEOUT (seconds): how long a sender waits for room
  /// before Send throws Timeout.
  std::chrono::milliseconds wait_timeout{120000};
  /// Where queued bytes and waits are counted; may be null. Borrowed.
  SendQueueMeter* meter = nullptr;

  /// Reads TANDEM_MAX_INFLIGHT_BYTES (0 or at least 64 KiB) and
  /// TANDEM_SEND_WAIT_TIMEOUT. Throws ConfigError for values out of range.
  static SendQueueBound FromEnvironment(const base::Environment& env);
};

/// The metrics of the send queues of one process, by the role of the peer a
/// message is addressed to (its header's recipient):
/// tandem_send_queued_bytes (gauge) and tandem_send_queue_waits_total and
/// tandem_send_queue_wait_timeouts_total (counters), each with label
/// peer_role. Thread-safety: any thread (lock-free after construction).
class SendQueueMeter {
 public:
  /// Creates every series in `stats`, one per value of
  /// `labels.peer_roles` (its services are not used). `stats` must outlive
  /// the meter's users.
  SendQueueMeter(base::StatsRegistry& stats, TrafficLabels labels);

  /// The index (in the labels' peer_roles) of the role of node `recipient`.
  int RoleOf(int recipient) const;
  /// `delta` bytes more (or fewer) queued toward a peer of role `role`.
  void AddQueued(int role, int64_t delta);
  /// A sender toward a peer of role `role` had to wait for room.
  void CountWait(int role);
  /// ... and gave up after the wait timeout.
  void CountTimeout(int role);

 private:
  struct Series {
    base::Gauge* queued = nullptr;
    base::Counter* waits = nullptr;
    base::Counter* timeouts = nullptr;
  };
  std::function<size_t(int node_id)> role_of_;
  std::vector<Series> series_;  // by peer role
};

}  // namespace tandem::net
