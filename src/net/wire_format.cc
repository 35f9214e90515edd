#include "net/wire_format.h"

#include <fmt/format.h>

#include <cstring>

#include "tandem/error.h"

namespace tandem::net {
namespace {

// Byte offsets of the header fields (docs/wire-format.md, "Header").
constexpr size_t kMagicAt = 0;
constexpr size_t kVersionAt = 4;
constexpr size_t kTypeAt = 6;
constexpr size_t kFlagsAt = 8;
constexpr size_t kSenderAt = 12;
constexpr size_t kRecipientAt = 16;
constexpr size_t kMetaLengthAt = 20;
constexpr size_t kMessageIdAt = 24;
constexpr size_t kRequestIdAt = 32;
constexpr size_t kPayloadLengthAt = 40;
constexpr size_t kReservedAt = 48;
constexpr size_t kChecksumAt = 60;
static_assert(kChecksumAt + sizeof(uint32_t) == kHeaderSize);

// The host is little-endian (asserted in base/byte_io.h), so a field's wire
// bytes are its memory bytes.
template <typename T>
void Store(std::span<std::byte, kHeaderSize> out, size_t at, T value) {
  std::memcpy(out.data() + at, &value, sizeof(T));
}

template <typename T>
T Load(std::span<const std::byte, kHeaderSize> in, size_t at) {
  T value;
  std::memcpy(&value, in.data() + at, sizeof(T));
  return value;
}

}  // namespace

void EncodeHeader(const Header& h, std::span<std::byte, kHeaderSize> out) {
  Store(out, kMagicAt, kWireMagic);
  Store(out, kVersionAt, h.version);
  Store(out, kTypeAt, h.type);
  Store(out, kFlagsAt, h.flags);
  Store(out, kSenderAt, h.sender);
  Store(out, kRecipientAt, h.recipient);
  Store(out, kMetaLengthAt, h.meta_length);
  Store(out, kMessageIdAt, h.message_id);
  Store(out, kRequestIdAt, h.request_id);
  Store(out, kPayloadLengthAt, h.payload_length);
  std::memset(out.data() + kReservedAt, 0, kChecksumAt - kReservedAt);
  Store(out, kChecksumAt, Crc32c(std::span<const std::byte>(out.data(), kChecksumAt)));
}

Header DecodeHeader(std::span<const std::byte, kHeaderSize> in, const WireLimits& limits) {
  // The magic and the version come first and sit at fixed offsets in every
  // protocol version, so a peer of another version (or something that is not
  // tandem at all) gets told so before the checksum, whose position a future
  // version might move.
  auto magic = Load<uint32_t>(in, kMagicAt);
  if (magic != kWireMagic) {
    throw ProtocolError(fmt::format(
        "bad frame magic 0x{:08X}, expected 0x{:08X} (\"TNDM\"): the peer is not a tandem "
        "process or the stream lost its framing",
        magic, kWireMagic));
  }
  Header h;
  h.version = Load<uint16_t>(in, kVersionAt);
  if (h.version != kProtocolVersion) {
    throw ProtocolError(fmt::format("peer speaks protocol version {}, this build speaks {}",
                                    h.version, kProtocolVersion));
  }
  auto stored = Load<uint32_t>(in, kChecksumAt);
  auto computed = Crc32c(in.first(kChecksumAt));
  if (stored != computed) {
    throw ProtocolError(fmt::format(
        "header checksum 0x{:08X} does not match the header's CRC-32C 0x{:08X}", stored, computed));
  }
  for (size_t i = kReservedAt; i < kChecksumAt; ++i) {
    if (in[i] != std::byte{0}) {
      throw ProtocolError(fmt::format("reserved header byte {} is 0x{:02X}, expected 0", i,
                                      static_cast<unsigned>(in[i])));
    }
  }
  h.type = Load<uint16_t>(in, kTypeAt);
  if (h.type < 1 || h.type > msgtype::kLast) {
    throw ProtocolError(
        fmt::format("message type {} is outside the valid range 1..{}", h.type, msgtype::kLast));
  }
  h.flags = Load<uint32_t>(in, kFlagsAt);
  if ((h.flags & ~flags::kKnown) != 0) {
    throw ProtocolError(fmt::format("unknown flag bits 0x{:X} in flags 0x{:X} (known: 0x{:X})",
                                    h.flags & ~flags::kKnown, h.flags, flags::kKnown));
  }
  h.sender = Load<int32_t>(in, kSenderAt);
  if (h.sender < Header::kNoNode) {
    throw ProtocolError(
        fmt::format("sender {} is not a node id (expected -1 or a node id >= 0)", h.sender));
  }
  h.recipient = Load<int32_t>(in, kRecipientAt);
  if (h.recipient < Header::kNoNode) {
    throw ProtocolError(
        fmt::format("recipient {} is not a node id (expected -1 or a node id >= 0)", h.recipient));
  }
  h.meta_length = Load<uint32_t>(in, kMetaLengthAt);
  if (h.meta_length > limits.max_meta_bytes) {
    throw ProtocolError(
        fmt::format("{}: metadata length {} exceeds limit {} (TANDEM_MAX_META_BYTES)",
                    MessageTypeName(h.type), h.meta_length, limits.max_meta_bytes));
  }
  h.payload_length = Load<uint64_t>(in, kPayloadLengthAt);
  if (h.payload_length > limits.max_payload_bytes) {
    throw ProtocolError(
        fmt::format("{}: payload length {} exceeds limit {} (TANDEM_MAX_PAYLOAD_BYTES)",
                    MessageTypeName(h.type), h.payload_length, limits.max_payload_bytes));
  }
  h.message_id = Load<uint64_t>(in, kMessageIdAt);
  h.request_id = Load<uint64_t>(in, kRequestIdAt);
  return h;
}

std::string MessageTypeName(uint16_t type) {
  switch (type) {
    case msgtype::kHandshakeHello:
      return "handshake hello";
    case msgtype::kHandshakeChallenge:
      return "handshake challenge";
    case msgtype::kHandshakeProof:
      return "handshake proof";
    case msgtype::kHandshakeWelcome:
      return "handshake welcome";
    case msgtype::kReliableAck:
      return "resend ack";
    default:
      break;
  }
  if (type == 0 || type > msgtype::kLast) return fmt::format("invalid message type {}", type);
  if (type < msgtype::kClusterFirst) return fmt::format("net message {}", type);
  if (type < msgtype::kKvFirst) return fmt::format("cluster message {}", type);
  if (type < msgtype::kCollectiveFirst) return fmt::format("kv message {}", type);
  return fmt::format("collective message {}", type);
}

}  // namespace tandem::net
