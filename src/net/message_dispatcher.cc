#include "net/message_dispatcher.h"

#include <fmt/format.h>

#include "tandem/error.h"

namespace tandem::net {

void MessageDispatcher::Register(uint16_t first, uint16_t last, TransportHandler* handler) {
  if (first > last || last > msgtype::kLast || handler == nullptr) {
    throw InvalidArgument(fmt::format("bad message type range [{}, {}]", first, last));
  }
  std::lock_guard lock(register_mu_);
  for (uint16_t t = first; t <= last; ++t) {
    if (by_type_[t].load() != nullptr) {
      throw InvalidArgument(fmt::format(
          "message types [{}, {}] overlap a range registered before (type {})", first, last, t));
    }
  }
  size_t n = handler_count_.load();
  bool known = false;
  for (size_t i = 0; i < n; ++i) known = known || handlers_[i].load() == handler;
  if (!known) {
    if (n == kMaxHandlers) {
      throw InvalidArgument(fmt::format("more than {} services on one transport", kMaxHandlers));
    }
    handlers_[n].store(handler);
    handler_count_.store(n + 1);
  }
  for (uint16_t t = first; t <= last; ++t) by_type_[t].store(handler);
}

void MessageDispatcher::OnConnected(ConnectionId id, const PeerInfo& peer) {
  size_t n = handler_count_.load();
  for (size_t i = 0; i < n; ++i) handlers_[i].load()->OnConnected(id, peer);
}

std::span<std::byte> MessageDispatcher::PayloadDestination(ConnectionId id, const Header& h,
                                                           const std::string& meta) {
  TransportHandler* handler = h.type <= msgtype::kLast ? by_type_[h.type].load() : nullptr;
  return handler ? handler->PayloadDestination(id, h, meta) : std::span<std::byte>{};
}

void MessageDispatcher::OnMessage(ConnectionId id, Message&& msg) {
  TransportHandler* handler =
      msg.header.type <= msgtype::kLast ? by_type_[msg.header.type].load() : nullptr;
  if (handler != nullptr) {
    handler->OnMessage(id, std::move(msg));
  } else if (Transport* t = transport_.load()) {
    t->Close(id);
  }
}

void MessageDispatcher::OnDisconnected(ConnectionId id, const std::string& reason) {
  size_t n = handler_count_.load();
  for (size_t i = 0; i < n; ++i) handlers_[i].load()->OnDisconnected(id, reason);
}

}  // namespace tandem::net
