// Lets several services share one transport: messages go to the handler
// registered for their type range; connection events go to every handler.
//
// One process has one transport (one event loop); its membership client,
// the scheduler service (in the scheduler process) and later the parameter
// server or collectives each register the types they own.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "net/transport.h"

namespace tandem::net {

/// Thread-safety: Register before the transport delivers the first event;
/// the callbacks then run on the transport's thread.
class MessageDispatcher final : public TransportHandler {
 public:
  /// Routes message types [first, last] to `handler` (not owned; must
  /// outlive the transport). Throws InvalidArgument if the range overlaps
  /// one registered before.
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
  struct Route {
    uint16_t first;
    uint16_t last;
    TransportHandler* handler;
  };
  TransportHandler* Find(uint16_t type) const;
  std::vector<Route> routes_;
  Transport* transport_ = nullptr;
};

}  // namespace tandem::net
