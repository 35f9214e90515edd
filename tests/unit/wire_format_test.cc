// The frame header: layout on the wire, round trips, and every rejection
// DecodeHeader owes a receiver (docs/wire-format.md).
#include "net/wire_format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <climits>
#include <cstring>
#include <functional>
#include <string>

#include "tandem/error.h"

namespace tandem::net {
namespace {

using Bytes = std::array<std::byte, kHeaderSize>;
using testing::HasSubstr;

Bytes Encode(const Header& h) {
  Bytes b;
  EncodeHeader(h, b);
  return b;
}

template <typename T>
T ReadAt(const Bytes& b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof(T));
  return v;
}

template <typename T>
void WriteAt(Bytes& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}

// Recomputes the checksum after a test changed a field, so that the decoder
// gets past the checksum to the check under test.
void Reseal(Bytes& b) {
  WriteAt<uint32_t>(b, 60, Crc32c(std::span<const std::byte>(b.data(), 60)));
}

Header Sample() {
  Header h;
  h.type = msgtype::kKvFirst + 3;
  h.flags = flags::kResponse;
  h.sender = 9;
  h.recipient = 8;
  h.meta_length = 123;
  h.message_id = 0x0102030405060708ull;
  h.request_id = 0x1112131415161718ull;
  h.payload_length = 456789;
  return h;
}

TEST(WireFormatTest, LaysOutTheDocumentedBytes) {
  Bytes b = Encode(Sample());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data()), 4), "TNDM");
  EXPECT_EQ(ReadAt<uint16_t>(b, 4), kProtocolVersion);
  EXPECT_EQ(ReadAt<uint16_t>(b, 6), msgtype::kKvFirst + 3);
  EXPECT_EQ(ReadAt<uint32_t>(b, 8), flags::kResponse);
  EXPECT_EQ(ReadAt<int32_t>(b, 12), 9);
  EXPECT_EQ(ReadAt<int32_t>(b, 16), 8);
  EXPECT_EQ(ReadAt<uint32_t>(b, 20), 123u);
  EXPECT_EQ(ReadAt<uint64_t>(b, 24), 0x0102030405060708ull);
  EXPECT_EQ(b[24], std::byte{0x08}) << "message id must be little-endian";
  EXPECT_EQ(ReadAt<uint64_t>(b, 32), 0x1112131415161718ull);
  EXPECT_EQ(ReadAt<uint64_t>(b, 40), 456789ull);
  for (size_t i = 48; i < 60; ++i) EXPECT_EQ(b[i], std::byte{0}) << "reserved byte " << i;
  EXPECT_EQ(ReadAt<uint32_t>(b, 60), Crc32c(std::span<const std::byte>(b.data(), 60)));
}

class HeaderRoundTripTest : public testing::TestWithParam<Header> {};

TEST_P(HeaderRoundTripTest, DecodeGivesBackWhatWasEncoded) {
  const Header& in = GetParam();
  WireLimits limits;
  limits.max_meta_bytes = UINT32_MAX;
  limits.max_payload_bytes = UINT64_MAX;
  Header out = DecodeHeader(Encode(in), limits);
  EXPECT_EQ(out.version, kProtocolVersion);
  EXPECT_EQ(out.type, in.type);
  EXPECT_EQ(out.flags, in.flags);
  EXPECT_EQ(out.sender, in.sender);
  EXPECT_EQ(out.recipient, in.recipient);
  EXPECT_EQ(out.meta_length, in.meta_length);
  EXPECT_EQ(out.message_id, in.message_id);
  EXPECT_EQ(out.request_id, in.request_id);
  EXPECT_EQ(out.payload_length, in.payload_length);
}

Header Make(uint16_t type, uint32_t f, int32_t sender, int32_t recipient, uint32_t meta,
            uint64_t id, uint64_t req, uint64_t payload) {
  Header h;
  h.type = type;
  h.flags = f;
  h.sender = sender;
  h.recipient = recipient;
  h.meta_length = meta;
  h.message_id = id;
  h.request_id = req;
  h.payload_length = payload;
  return h;
}

INSTANTIATE_TEST_SUITE_P(
    Headers, HeaderRoundTripTest,
    testing::Values(Make(msgtype::kHandshakeHello, 0, -1, -1, 0, 0, 0, 0),
                    Make(msgtype::kLast, flags::kKnown, INT32_MAX, 0, UINT32_MAX, UINT64_MAX,
                         UINT64_MAX, UINT64_MAX),
                    Make(msgtype::kClusterFirst, flags::kError, 0, 1, 1, 1, 2, 3),
                    Make(msgtype::kCollectiveFirst, 0, 3, -1, 4096, 1ull << 40, 7, 1ull << 33),
                    Sample()));

struct Violation {
  std::string name;
  std::function<void(Bytes&)> corrupt;  // applied to Sample(); reseals unless testing the checksum
  std::string expected;                 // a substring of the error
};

WireLimits SampleLimits() {
  WireLimits limits;
  limits.max_meta_bytes = 1000;
  limits.max_payload_bytes = 1u << 20;
  return limits;
}

std::vector<Violation> Violations() {
  std::vector<Violation> v = {
      {"magic",
       [](Bytes& b) {
         b[0] = std::byte{'X'};
         Reseal(b);
       },
       "bad frame magic"},
      {"http_request", [](Bytes& b) { std::memcpy(b.data(), "GET / HTTP/1.1\r\n", 16); },
       "bad frame magic 0x20544547"},
      {"newer_version",
       [](Bytes& b) {
         WriteAt<uint16_t>(b, 4, 2);
         Reseal(b);
       },
       "protocol version 2, this build speaks 1"},
      {"older_version",
       [](Bytes& b) {
         WriteAt<uint16_t>(b, 4, 0);
         Reseal(b);
       },
       "protocol version 0, this build speaks 1"},
      {"checksum_field", [](Bytes& b) { b[61] ^= std::byte{0x40}; }, "header checksum"},
      {"flipped_id_bit", [](Bytes& b) { b[30] ^= std::byte{0x01}; }, "header checksum"},
      {"type_zero",
       [](Bytes& b) {
         WriteAt<uint16_t>(b, 6, 0);
         Reseal(b);
       },
       "message type 0 is outside the valid range 1..255"},
      {"type_256",
       [](Bytes& b) {
         WriteAt<uint16_t>(b, 6, 256);
         Reseal(b);
       },
       "message type 256 is outside"},
      {"type_max",
       [](Bytes& b) {
         WriteAt<uint16_t>(b, 6, 0xFFFF);
         Reseal(b);
       },
       "message type 65535 is outside"},
      {"flag_bit_2",
       [](Bytes& b) {
         WriteAt<uint32_t>(b, 8, 1u << 2);
         Reseal(b);
       },
       "unknown flag bits 0x4"},
      {"flag_bit_31",
       [](Bytes& b) {
         WriteAt<uint32_t>(b, 8, (1u << 31) | flags::kResponse);
         Reseal(b);
       },
       "unknown flag bits 0x80000000"},
      {"sender_minus_2",
       [](Bytes& b) {
         WriteAt<int32_t>(b, 12, -2);
         Reseal(b);
       },
       "sender -2 is not a node id"},
      {"recipient_int_min",
       [](Bytes& b) {
         WriteAt<int32_t>(b, 16, INT32_MIN);
         Reseal(b);
       },
       "recipient -2147483648 is not a node id"},
      {"meta_over_limit",
       [](Bytes& b) {
         WriteAt<uint32_t>(b, 20, 1001);
         Reseal(b);
       },
       "metadata length 1001 exceeds limit 1000"},
      {"meta_max",
       [](Bytes& b) {
         WriteAt<uint32_t>(b, 20, UINT32_MAX);
         Reseal(b);
       },
       "metadata length 4294967295 exceeds limit 1000"},
      {"payload_over_limit",
       [](Bytes& b) {
         WriteAt<uint64_t>(b, 40, (1u << 20) + 1);
         Reseal(b);
       },
       "payload length 1048577 exceeds limit 1048576"},
      {"payload_2_pow_60",
       [](Bytes& b) {
         WriteAt<uint64_t>(b, 40, 1ull << 60);
         Reseal(b);
       },
       "payload length 1152921504606846976 exceeds limit"},
  };
  for (size_t i = 48; i < 60; ++i) {
    v.push_back({"reserved_" + std::to_string(i),
                 [i](Bytes& b) {
                   b[i] = std::byte{0x80};
                   Reseal(b);
                 },
                 "reserved header byte " + std::to_string(i) + " is 0x80, expected 0"});
  }
  return v;
}

class HeaderViolationTest : public testing::TestWithParam<Violation> {};

TEST_P(HeaderViolationTest, IsRejectedWithAMessageNamingIt) {
  Header h = Sample();
  h.meta_length = 10;
  h.payload_length = 10;
  Bytes b = Encode(h);
  ASSERT_NO_THROW(DecodeHeader(b, SampleLimits())) << "the unmodified header must pass";
  GetParam().corrupt(b);
  try {
    DecodeHeader(b, SampleLimits());
    FAIL() << "expected a ProtocolError";
  } catch (const ProtocolError& e) {
    EXPECT_THAT(e.what(), HasSubstr(GetParam().expected));
  }
}

INSTANTIATE_TEST_SUITE_P(Violations, HeaderViolationTest, testing::ValuesIn(Violations()),
                         [](const auto& tp) { return tp.param.name; });

TEST(WireFormatTest, LengthsExactlyAtTheLimitsPass) {
  Header h = Sample();
  h.meta_length = 1000;
  h.payload_length = 1u << 20;
  Header out = DecodeHeader(Encode(h), SampleLimits());
  EXPECT_EQ(out.meta_length, 1000u);
  EXPECT_EQ(out.payload_length, 1u << 20);
}

TEST(WireFormatTest, ZeroLimitsAcceptOnlyEmptySections) {
  WireLimits none;
  none.max_meta_bytes = 0;
  none.max_payload_bytes = 0;
  Header h = Make(msgtype::kHandshakeWelcome, 0, -1, -1, 0, 0, 0, 0);
  EXPECT_NO_THROW(DecodeHeader(Encode(h), none));
  h.payload_length = 1;
  EXPECT_THROW(DecodeHeader(Encode(h), none), ProtocolError);
}

TEST(WireFormatTest, NamesMessageTypesByLayer) {
  EXPECT_EQ(MessageTypeName(msgtype::kHandshakeHello), "handshake hello");
  EXPECT_EQ(MessageTypeName(msgtype::kHandshakeWelcome), "handshake welcome");
  EXPECT_EQ(MessageTypeName(10), "net message 10");
  EXPECT_EQ(MessageTypeName(70), "cluster message 70");
  EXPECT_EQ(MessageTypeName(130), "kv message 130");
  EXPECT_EQ(MessageTypeName(255), "collective message 255");
  EXPECT_EQ(MessageTypeName(0), "invalid message type 0");
  EXPECT_EQ(MessageTypeName(300), "invalid message type 300");
}

}  // namespace
}  // namespace tandem::net
