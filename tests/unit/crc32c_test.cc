// CRC-32C: known answers and agreement of the portable and hardware paths.
#include "net/crc32c.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace tandem::net {
namespace {

struct KnownAnswer {
  std::string name;
  std::vector<uint8_t> input;
  uint32_t crc;
};

std::vector<uint8_t> Iota(int first, int step, int count) {
  std::vector<uint8_t> v;
  for (int i = 0; i < count; ++i) v.push_back(static_cast<uint8_t>(first + i * step));
  return v;
}

std::vector<KnownAnswer> KnownAnswers() {
  // The check value of the CRC catalogue and the iSCSI test vectors of
  // RFC 3720, appendix B.4.
  return {
      {"empty", {}, 0x00000000u},
      {"check_123456789", {'1', '2', '3', '4', '5', '6', '7', '8', '9'}, 0xE3069283u},
      {"zeros_32", std::vector<uint8_t>(32, 0x00), 0x8A9136AAu},
      {"ones_32", std::vector<uint8_t>(32, 0xFF), 0x62A8AB43u},
      {"incrementing_32", Iota(0, 1, 32), 0x46DD794Eu},
      {"decrementing_32", Iota(31, -1, 32), 0x113FDB5Cu},
  };
}

std::span<const std::byte> Bytes(const std::vector<uint8_t>& v) {
  return std::as_bytes(std::span(v));
}

class Crc32cKnownAnswerTest : public testing::TestWithParam<KnownAnswer> {};

TEST_P(Crc32cKnownAnswerTest, PortableMatches) {
  EXPECT_EQ(Crc32cPortable(Bytes(GetParam().input)), GetParam().crc);
}

TEST_P(Crc32cKnownAnswerTest, DispatchedMatches) {
  EXPECT_EQ(Crc32c(Bytes(GetParam().input)), GetParam().crc);
}

INSTANTIATE_TEST_SUITE_P(Vectors, Crc32cKnownAnswerTest, testing::ValuesIn(KnownAnswers()),
                         [](const auto& tp) { return tp.param.name; });

// Both paths must agree for every length (the tail loops handle 0..7 left-over
// bytes) and every alignment of the start.
class Crc32cAgreementTest : public testing::TestWithParam<size_t> {};

TEST_P(Crc32cAgreementTest, PortableAndDispatchedAgreeAtEveryOffset) {
  std::mt19937 rng(static_cast<uint32_t>(GetParam()));
  std::vector<uint8_t> data(GetParam() + 16);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (size_t offset = 0; offset < 16; ++offset) {
    auto span = Bytes(data).subspan(offset, GetParam());
    EXPECT_EQ(Crc32cPortable(span), Crc32c(span)) << "offset " << offset;
  }
}

INSTANTIATE_TEST_SUITE_P(Lengths, Crc32cAgreementTest,
                         testing::Values(0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 60, 63, 64, 65, 255, 1000,
                                         4096, 65537));

TEST(Crc32cTest, DetectsEverySingleBitFlipOfAHeaderSizedBlock) {
  std::vector<uint8_t> data = Iota(7, 13, 60);
  uint32_t clean = Crc32cPortable(Bytes(data));
  for (size_t bit = 0; bit < data.size() * 8; ++bit) {
    data[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_NE(Crc32c(Bytes(data)), clean) << "bit " << bit;
    data[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
}

TEST(Crc32cTest, ReportsHardwareSupportConsistently) {
  // Whatever the CPU, the answer must not change between calls, and the
  // dispatched path must give the catalogue's check value either way.
  bool first = Crc32cHasHardwareSupport();
  EXPECT_EQ(Crc32cHasHardwareSupport(), first);
  std::string check = "123456789";
  EXPECT_EQ(Crc32c(std::as_bytes(std::span(check.data(), check.size()))), 0xE3069283u);
}

}  // namespace
}  // namespace tandem::net
