// Lets several services share one transport: messages go to the handler
// registered for their type range; connection events go to every handler.
//
// One process has one transport (one event loop); its membership client,
// the scheduler service (in the scheduler process) and later the parameter
// server or collectives each register the types they own.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "net/transport.h"

namespace tandem::net {

/// Thread-safety: Register may be called from any thread, also while the
/// transport delivers events (a service may start after the transport
/// listens); the callbacks run on the transport's thread. Routing reads only
/// atomics, so it costs no lock per message.
class MessageDispatcher final : public TransportHandler {
 public:
  /// The most services one dispatcher serves.
  static constexpr size_t kMaxHandlers = 8;

  /// Routes message types [first, last] to `handler` (not owned; must
  /// outlive the transport's callbacks). Throws InvalidArgument if the range
  /// overlaps one registered before, or kMaxHandlers are registered.
  void Register(uint16_t first, uint16_t last, TransportHandler* handler);

  void OnConnected(ConnectionId id, const PeerInfo& peer) override;
  std::span<std::byte> PayloadDestination(ConnectionId id, const Header& h,
                                          const std::string& meta) override;
  /// Messages of a type nobody registered are dropped with the connection:
  /// the peer speaks something we do not.
  void OnMessage(ConnectionId id, Message&& msg) override;
  void OnDisconnected(ConnectionId id, const std::string& reason) override;

  /// Set by the owner so an unroutable message can close its connection.
  void SetTransport(Transport* transport) { transport_ = transport; }

 private:
  std::mutex register_mu_;  // serialises Register calls
  std::array<std::atomic<TransportHandler*>, msgtype::kLast + 1> by_type_{};
  std::array<std::atomic<TransportHandler*>, kMaxHandlers> handlers_{};
  std::atomic<size_t> handler_count_{0};
  std::atomic<Transport*> transport_{nullptr};
};

}  // namespace tandem::net
