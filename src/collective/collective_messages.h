// The messages of the collectives (docs/protocol-collective.md) and their
// metadata codecs. Every decoder is bounds-checked and throws
// tandem::ProtocolError on malformed input.
#pragma once

#include <compare>
#include <cstdint>
#include <string>

#include "net/wire_format.h"

namespace tandem::collective {

/// Message types of the collective range (net::msgtype::kCollectiveFirst..255).
namespace msg {
/// First message on every mesh connection, from the connecting side.
inline constexpr uint16_t kHello = net::msgtype::kCollectiveFirst + 0;
/// A piece of an operation: metadata is a MessageKey, payload the bytes.
inline constexpr uint16_t kData = net::msgtype::kCollectiveFirst + 1;
/// The accepting side's answer to kHello (no metadata): the link is known
/// on both ends, data may flow.
inline constexpr uint16_t kHelloAck = net::msgtype::kCollectiveFirst + 2;
inline constexpr uint16_t kLast = net::msgtype::kLast;
}  // namespace msg

/// kHello's metadata: who is connecting, and which of the connections
/// between the pair this is (0..connections-1).
struct Hello {
  int32_t rank = -1;
  uint32_t connection = 0;
  uint32_t connections = 1;

  std::string Encode() const;
  static Hello Decode(const std::string& meta);
};

/// kData's metadata: which receive of which operation the payload fills.
/// (communicator, sequence) names the operation; `tag` the piece within it
/// (each algorithm documents its tags). The sender's rank comes from the
/// connection.
struct MessageKey {
  uint32_t communicator = 0;
  uint64_t sequence = 0;
  uint64_t tag = 0;

  auto operator<=>(const MessageKey&) const = default;
  std::string Encode() const;
  static MessageKey Decode(const std::string& meta);
};

}  // namespace tandem::collective
