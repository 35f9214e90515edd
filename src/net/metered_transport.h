// Counting what crosses a transport: messages and bytes sent and received,
// by a label of the peer node (peer_role) and one of the message type
// (service). The net layer gives the labels no meaning: whoever builds the
// meter names their values and maps node ids and message types onto them
// (a cluster node: cluster/traffic_labels.h). docs/metrics.md names the
// metrics.
//
// MeteredTransport sits between the services and a real transport on both
// paths: services send through it, and the real transport delivers to it,
// which passes everything on to the upper handler (the dispatcher).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/stats.h"
#include "net/transport.h"

namespace tandem::net {

/// The labels one process counts its traffic by. Every value is listed up
/// front, so that every series exists (at zero) from the start. A value type.
struct TrafficLabels {
  /// The values of label peer_role.
  std::vector<std::string> peer_roles;
  /// The index in peer_roles of node `node_id`, which is negative for a
  /// sender that has no id yet. Called on transport threads.
  std::function<size_t(int node_id)> peer_role_of;
  /// The values of label service.
  std::vector<std::string> services;
  /// The index in services of message type `type`. Called on transport threads.
  std::function<size_t(uint16_t type)> service_of;
};

/// The counters of one process. Thread-safety: any thread (lock-free after
/// construction).
class TrafficMeter {
 public:
  /// Creates every series in `stats` (tandem_{sent,received}_{messages,bytes}_total
  /// with labels peer_role and service, one per pair of values of `labels`).
  TrafficMeter(base::StatsRegistry& stats, TrafficLabels labels);

  /// One message of `bytes` bytes (header, meta and payload) sent to or
  /// received from `h.recipient` / `h.sender`.
  void Sent(const Header& h, uint64_t bytes);
  void Received(const Header& h, uint64_t bytes);

 private:
  struct Pair {
    base::Counter* messages = nullptr;
    base::Counter* bytes = nullptr;
  };
  Pair& At(bool sent, int peer, uint16_t type);

  TrafficLabels labels_;
  // [sent?][peer role][service], flattened.
  std::vector<Pair> series_;
};

/// A Transport that counts, then forwards to `inner`; and the handler
/// `inner` delivers to, which counts, then forwards to `upper`.
/// Thread-safety: as the inner transport's (every call forwards).
class MeteredTransport final : public Transport, public TransportHandler {
 public:
  /// `meter` and `upper` are borrowed and must outlive this.
  MeteredTransport(TrafficMeter& meter, TransportHandler* upper);
  ~MeteredTransport() override;

  /// Sets the real transport, which must have been built with `this` as its
  /// handler. Call once, before any other method.
  void SetInner(std::unique_ptr<Transport> inner);
  Transport& inner() { return *inner_; }

  Endpoint Listen(const Endpoint& local) override;
  ConnectionId Connect(const Endpoint& remote, std::chrono::milliseconds timeout) override;
  void Send(ConnectionId id, OutgoingMessage msg) override;
  void Close(ConnectionId id) override;
  PeerInfo Peer(ConnectionId id) const override;
  void Shutdown() override;
  bool ReadWhileWaiting(std::chrono::steady_clock::time_point deadline,
                        const std::function<bool()>& done, std::chrono::milliseconds slice,
                        std::chrono::microseconds spin) override;

  void OnConnected(ConnectionId id, const PeerInfo& peer) override;
  std::span<std::byte> PayloadDestination(ConnectionId id, const Header& h,
                                          const std::string& meta) override;
  void OnMessage(ConnectionId id, Message&& msg) override;
  void OnDisconnected(ConnectionId id, const std::string& reason) override;

 private:
  TrafficMeter& meter_;
  TransportHandler* upper_;
  std::unique_ptr<Transport> inner_;
};

}  // namespace tandem::net
