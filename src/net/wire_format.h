// The frame every tandem connection carries: a fixed 64-byte little-endian
// header, then `meta_length` bytes of metadata, then `payload_length` bytes of
// payload. docs/wire-format.md is the normative description; this file
// implements it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "net/crc32c.h"

namespace tandem::net {

/// "TNDM" as it appears on the wire (bytes 'T' 'N' 'D' 'M').
inline constexpr uint32_t kWireMagic = 0x4D444E54;
/// Bumped whenever the header layout or a net-level message changes.
inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr size_t kHeaderSize = 64;

/// Message types 0..63 belong to the net layer (handshake); upper layers own
/// the ranges below and define their own values in them.
namespace msgtype {
inline constexpr uint16_t kHandshakeHello = 1;
inline constexpr uint16_t kHandshakeChallenge = 2;
inline constexpr uint16_t kHandshakeProof = 3;
inline constexpr uint16_t kHandshakeWelcome = 4;
/// Acknowledgement of the reliable-delivery layer (docs/protocol-resend.md).
inline constexpr uint16_t kReliableAck = 5;
inline constexpr uint16_t kClusterFirst = 64;      ///< src/cluster: 64..127
inline constexpr uint16_t kKvFirst = 128;          ///< src/kv: 128..191
inline constexpr uint16_t kCollectiveFirst = 192;  ///< src/collective: 192..255
inline constexpr uint16_t kLast = 255;
}  // namespace msgtype

/// Header flags.
namespace flags {
inline constexpr uint32_t kResponse = 1u << 0;  ///< answers the request with this request_id
inline constexpr uint32_t kError = 1u << 1;     ///< metadata carries an error text
inline constexpr uint32_t kKnown = kResponse | kError;
}  // namespace flags

/// The decoded header. Node ids are the cluster's; the net layer only
/// carries them. kNoNode marks "not yet known".
struct Header {
  static constexpr int32_t kNoNode = -1;
  uint16_t version = kProtocolVersion;
  uint16_t type = 0;
  uint32_t flags = 0;
  int32_t sender = kNoNode;
  int32_t recipient = kNoNode;
  uint32_t meta_length = 0;
  uint64_t message_id = 0;
  uint64_t request_id = 0;
  uint64_t payload_length = 0;
};

/// What a receiver accepts. Checked before any allocation.
struct WireLimits {
  uint32_t max_meta_bytes = 16u << 20;
  uint64_t max_payload_bytes = uint64_t{16} << 30;
};

/// Writes `h` into `out`: the magic, every field of `h` as given (including
/// `h.version`), zeroed reserved bytes and the header checksum. It does not
/// validate `h`: the receiver's DecodeHeader is the gatekeeper, and tests and
/// fuzz corpora need to write headers a receiver must reject. Any thread;
/// never throws.
void EncodeHeader(const Header& h, std::span<std::byte, kHeaderSize> out);

/// Decodes and validates a header, in this order: magic, version, checksum,
/// reserved bytes, type range, flags, sender and recipient, then both lengths
/// against `limits`. Throws tandem::ProtocolError describing the first
/// violation (e.g. "payload length 17179869185 exceeds limit 17179869184").
/// Any thread.
Header DecodeHeader(std::span<const std::byte, kHeaderSize> in, const WireLimits& limits);

/// A short name for a message type in error messages: "handshake hello" for
/// the net layer's types, "cluster message 70" / "kv message 130" /
/// "collective message 200" for the upper layers' ranges. Any thread.
std::string MessageTypeName(uint16_t type);

}  // namespace tandem::net
