// Counting what crosses a transport: messages and bytes sent and received,
// by the role of the peer node and by the service that owns the message
// type (cluster 64..127, kv 128..191, collective 192..255; wire_format.h).
// docs/metrics.md names the metrics.
//
// MeteredTransport sits between the services and a real transport on both
// paths: services send through it, and the real transport delivers to it,
// which passes everything on to the upper handler (the dispatcher).
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>

#include "base/stats.h"
#include "net/transport.h"

namespace tandem::net {

/// The counters of one process. Thread-safety: any thread (lock-free after
/// construction).
class TrafficMeter {
 public:
  /// The role label ("scheduler", "server", "worker") of node `id`, or
  /// "unknown" for a sender that has no id yet. Called on transport threads.
  using RoleOf = std::function<const char*(int node_id)>;

  /// Creates every series in `stats` (tandem_{sent,received}_{messages,bytes}_total
  /// with labels peer_role and service).
  TrafficMeter(base::StatsRegistry& stats, RoleOf role_of);

  /// One message of `bytes` bytes (header, meta and payload) sent to or
  /// received from `h.recipient` / `h.sender`.
  void Sent(const Header& h, uint64_t bytes);
  void Received(const Header& h, uint64_t bytes);

  /// The label of a role index used here: 0 scheduler, 1 server, 2 worker,
  /// 3 unknown.
  static constexpr std::array<const char*, 4> kRoles = {"scheduler", "server", "worker", "unknown"};
  /// The index in kRoles of a role label; 3 for any other text.
  static int RoleIndex(const char* role);

 private:
  struct Pair {
    base::Counter* messages = nullptr;
    base::Counter* bytes = nullptr;
  };
  Pair& At(bool sent, int peer, uint16_t type);

  RoleOf role_of_;
  // [sent?][role][service: cluster, kv, collective, other]
  std::array<std::array<std::array<Pair, 4>, 4>, 2> series_;
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
