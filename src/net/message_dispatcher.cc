#include "net/message_dispatcher.h"

#include <fmt/format.h>

#include "tandem/error.h"

namespace tandem::net {

void MessageDispatcher::Register(uint16_t first, uint16_t last, TransportHandler* handler) {
  if (first > last || handler == nullptr) {
    throw InvalidArgument(fmt::format("bad message type range [{}, {}]", first, last));
  }
  for (const auto& r : routes_) {
    if (first <= r.last && r.first <= last) {
      throw InvalidArgument(fmt::format("message types [{}, {}] overlap registered [{}, {}]",
                                        first, last, r.first, r.last));
    }
  }
  routes_.push_back({first, last, handler});
}

TransportHandler* MessageDispatcher::Find(uint16_t type) const {
  for (const auto& r : routes_) {
    if (type >= r.first && type <= r.last) return r.handler;
  }
  return nullptr;
}

void MessageDispatcher::OnConnected(ConnectionId id, const PeerInfo& peer) {
  for (const auto& r : routes_) r.handler->OnConnected(id, peer);
}

std::span<std::byte> MessageDispatcher::PayloadDestination(ConnectionId id, const Header& h,
                                                           const std::string& meta) {
  TransportHandler* handler = Find(h.type);
  return handler ? handler->PayloadDestination(id, h, meta) : std::span<std::byte>{};
}

void MessageDispatcher::OnMessage(ConnectionId id, Message&& msg) {
  TransportHandler* handler = Find(msg.header.type);
  if (handler != nullptr) {
    handler->OnMessage(id, std::move(msg));
  } else if (transport_ != nullptr) {
    transport_->Close(id);
  }
}

void MessageDispatcher::OnDisconnected(ConnectionId id, const std::string& reason) {
  for (const auto& r : routes_) r.handler->OnDisconnected(id, reason);
}

}  // namespace tandem::net
