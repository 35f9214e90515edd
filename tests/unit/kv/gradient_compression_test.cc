// Gradient compression against a reference quantiser written here from
// MXNet 1.9's description (docs/gradient-compression.md), at the level of
// 32-bit words rather than bytes, so that it shares no code path with
// src/kv/compression. Parameterised over type, threshold and sizes that are
// and are not multiples of 16 and 32; several calls in a row check the
// residual's carry-over.
#include "kv/compression/gradient_compression.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "tandem/error.h"

namespace tandem::kv {
namespace {

std::vector<float> Grad(size_t n, uint32_t seed, float scale) {
  std::vector<float> out(n);
  uint32_t x = seed * 747796405u + 2891336453u;
  for (auto& v : out) {
    x = x * 1664525u + 1013904223u;
    v = (static_cast<float>(x >> 8) / static_cast<float>(1u << 24) * 2 - 1) * scale;
  }
  return out;
}

// The reference: one pass per value, codes or-ed into little-endian words.
struct Reference {
  CompressionType type;
  float threshold;

  unsigned Bit(size_t i) const {
    if (type == CompressionType::kTwoBit) {
      const size_t j = i % 16;  // value j of its word: byte j / 4, top pair first
      return static_cast<unsigned>(8 * (j / 4) + 6 - 2 * (j % 4));
    }
    const size_t j = i % 32;  // byte j / 8, top bit first
    return static_cast<unsigned>(8 * (j / 8) + 7 - (j % 8));
  }
  size_t PerWord() const { return type == CompressionType::kTwoBit ? 16 : 32; }

  std::vector<uint32_t> Compress(const std::vector<float>& grad,
                                 std::vector<float>& residual) const {
    std::vector<uint32_t> words((grad.size() + PerWord() - 1) / PerWord(), 0u);
    for (size_t i = 0; i < grad.size(); ++i) {
      residual[i] += grad[i];
      uint32_t code = 0;
      if (type == CompressionType::kTwoBit) {
        if (residual[i] >= threshold) {
          code = 3;
          residual[i] -= threshold;
        } else if (residual[i] <= -threshold) {
          code = 2;
          residual[i] += threshold;
        }
      } else if (residual[i] > threshold) {
        code = 1;
        residual[i] -= 1;
      } else {
        residual[i] += 1;
      }
      words[i / PerWord()] |= code << Bit(i);
    }
    return words;
  }

  std::vector<float> Decompress(const std::vector<uint32_t>& words, size_t n) const {
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t code = words[i / PerWord()] >> Bit(i);
      if (type == CompressionType::kTwoBit) {
        out[i] = (code & 3) == 3 ? threshold : ((code & 3) == 2 ? -threshold : 0.0f);
      } else {
        out[i] = (code & 1) != 0 ? 1.0f : -1.0f;
      }
    }
    return out;
  }
};

std::vector<std::byte> WordsToBytes(const std::vector<uint32_t>& words) {
  std::vector<std::byte> out;
  for (uint32_t w : words) {
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<std::byte>((w >> (8 * b)) & 0xFF));
  }
  return out;
}

std::vector<uint32_t> BitsOf(const std::vector<float>& v) {
  std::vector<uint32_t> out;
  for (float f : v) out.push_back(std::bit_cast<uint32_t>(f));
  return out;
}

using Param = std::tuple<CompressionType, float, size_t>;

class CompressionMatchesReference : public ::testing::TestWithParam<Param> {};

TEST_P(CompressionMatchesReference, FourCallsWithResidualCarryOver) {
  const auto [type, threshold, n] = GetParam();
  const CompressionParams params{type, threshold};
  const Reference ref{type, threshold};
  std::vector<float> residual(n, 0.0f), ref_residual(n, 0.0f);
  for (uint32_t call = 0; call < 4; ++call) {
    // Small gradients, so that the residual must build up before it sends.
    const auto grad = Grad(n, call, call % 2 == 0 ? 0.3f : 1.2f);
    std::vector<std::byte> out(CompressedBytes(params, n), std::byte{0xAB});
    Compress(params, grad, residual, out);
    const auto words = ref.Compress(grad, ref_residual);
    ASSERT_EQ(out, WordsToBytes(words)) << "call " << call;
    ASSERT_EQ(BitsOf(residual), BitsOf(ref_residual)) << "call " << call;
    std::vector<float> decoded(n, 42.0f);
    Decompress(params, out, decoded);
    ASSERT_EQ(BitsOf(decoded), BitsOf(ref.Decompress(words, n))) << "call " << call;
  }
}

std::string TypeLabel(CompressionType t) { return t == CompressionType::kTwoBit ? "2bit" : "1bit"; }

INSTANTIATE_TEST_SUITE_P(
    TwoBit, CompressionMatchesReference,
    ::testing::Combine(::testing::Values(CompressionType::kTwoBit), ::testing::Values(0.5f, 0.25f),
                       ::testing::Values(size_t{0}, size_t{1}, size_t{3}, size_t{15}, size_t{16},
                                         size_t{17}, size_t{33}, size_t{100}, size_t{4099})),
    [](const ::testing::TestParamInfo<Param>& param_info) {
      return TypeLabel(std::get<0>(param_info.param)) + "_t" +
             std::to_string(static_cast<int>(std::get<1>(param_info.param) * 100)) + "_n" +
             std::to_string(std::get<2>(param_info.param));
    });

INSTANTIATE_TEST_SUITE_P(
    OneBit, CompressionMatchesReference,
    ::testing::Combine(::testing::Values(CompressionType::kOneBit), ::testing::Values(0.0f, 0.5f),
                       ::testing::Values(size_t{0}, size_t{1}, size_t{7}, size_t{31}, size_t{32},
                                         size_t{33}, size_t{65}, size_t{4099})),
    [](const ::testing::TestParamInfo<Param>& param_info) {
      return TypeLabel(std::get<0>(param_info.param)) + "_t" +
             std::to_string(static_cast<int>(std::get<1>(param_info.param) * 100)) + "_n" +
             std::to_string(std::get<2>(param_info.param));
    });

// ---------------------------------------------------------------------------
// The layout of specific bit patterns, written out by hand.
// ---------------------------------------------------------------------------

TEST(TwoBitLayout, FirstValueInTheTopBitsOfTheFirstByte) {
  const CompressionParams p{CompressionType::kTwoBit, 0.5f};
  // +1 -> 11, -1 -> 10, 0 -> 00, 0.25 -> 00 | 0.5 -> 11 (>=), 0.25 -> 00,
  // -0.5 -> 10 (<=), 0.75 -> 11 | then 0, and value 16 (-2) in word 1.
  std::vector<float> grad = {1, -1, 0, 0.25f, 0.5f, 0.25f, -0.5f, 0.75f, 0,
                             0, 0,  0, 0,     0,    0,     0,     -2};
  std::vector<float> residual(grad.size(), 0.0f);
  std::vector<std::byte> out(CompressedBytes(p, grad.size()));
  ASSERT_EQ(out.size(), 8u);
  Compress(p, grad, residual, out);
  const std::vector<uint8_t> want = {0xE0, 0xCB, 0x00, 0x00, 0x80, 0x00, 0x00, 0x00};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(static_cast<uint8_t>(out[i]), want[i]) << i;
  EXPECT_EQ(residual, (std::vector<float>{0.5f, -0.5f, 0, 0.25f, 0, 0.25f, 0, 0.25f, 0, 0, 0, 0, 0,
                                          0, 0, 0, -1.5f}));
  std::vector<float> decoded(grad.size());
  Decompress(p, out, decoded);
  EXPECT_EQ(decoded, (std::vector<float>{0.5f, -0.5f, 0, 0, 0.5f, 0, -0.5f, 0.5f, 0, 0, 0, 0, 0, 0,
                                         0, 0, -0.5f}));
}

TEST(TwoBitLayout, PairZeroOneReadsAsZero) {
  const CompressionParams p{CompressionType::kTwoBit, 2.0f};
  const std::vector<std::byte> in = {std::byte{0x7F}, std::byte{0}, std::byte{0}, std::byte{0}};
  std::vector<float> out(4);
  Decompress(p, in, out);  // 01 11 11 11
  EXPECT_EQ(out, (std::vector<float>{0, 2, 2, 2}));
}

TEST(TwoBitLayout, ResidualCarriesOverUntilItCrossesTheThreshold) {
  const CompressionParams p{CompressionType::kTwoBit, 1.0f};
  std::vector<float> residual = {0};
  std::vector<std::byte> out(4);
  std::vector<float> decoded(1);
  const std::vector<float> sent_want = {0, 0, 0, 1};  // 0.25 per call; residual 1 at call 4
  for (int call = 0; call < 4; ++call) {
    Compress(p, std::vector<float>{0.25f}, residual, out);
    Decompress(p, out, decoded);
    EXPECT_EQ(decoded[0], sent_want[call]) << call;
  }
  EXPECT_EQ(residual[0], 0.0f);
}

TEST(OneBitLayout, FirstValueInTheTopBitOfTheFirstByte) {
  const CompressionParams p{CompressionType::kOneBit, 0.5f};
  // 1 -> 1, -1 -> 0, 0.75 -> 1, 0.5 -> 0 (not above), then zeros -> 0;
  // value 32 (1) opens word 1.
  std::vector<float> grad(33, 0.0f);
  grad[0] = 1;
  grad[1] = -1;
  grad[2] = 0.75f;
  grad[3] = 0.5f;
  grad[9] = 2;
  grad[32] = 1;
  std::vector<float> residual(grad.size(), 0.0f);
  std::vector<std::byte> out(CompressedBytes(p, grad.size()));
  ASSERT_EQ(out.size(), 8u);
  Compress(p, grad, residual, out);
  const std::vector<uint8_t> want = {0xA0, 0x40, 0x00, 0x00, 0x80, 0x00, 0x00, 0x00};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(static_cast<uint8_t>(out[i]), want[i]) << i;
  EXPECT_EQ(residual[0], 0.0f);
  EXPECT_EQ(residual[1], 0.0f);
  EXPECT_EQ(residual[2], -0.25f);
  EXPECT_EQ(residual[3], 1.5f);
  EXPECT_EQ(residual[4], 1.0f);
  EXPECT_EQ(residual[9], 1.0f);
  std::vector<float> decoded(grad.size());
  Decompress(p, out, decoded);
  EXPECT_EQ(decoded[0], 1.0f);
  EXPECT_EQ(decoded[1], -1.0f);
  EXPECT_EQ(decoded[3], -1.0f);
  EXPECT_EQ(decoded[9], 1.0f);
  EXPECT_EQ(decoded[32], 1.0f);
}

TEST(CompressionSizes, WholeWordsAsMxnet) {
  const CompressionParams two{CompressionType::kTwoBit, 0.5f};
  const CompressionParams one{CompressionType::kOneBit, 0.5f};
  const CompressionParams none{CompressionType::kNone, 0.5f};
  EXPECT_EQ(CompressedBytes(two, 0), 0u);
  EXPECT_EQ(CompressedBytes(two, 1), 4u);
  EXPECT_EQ(CompressedBytes(two, 16), 4u);
  EXPECT_EQ(CompressedBytes(two, 17), 8u);
  EXPECT_EQ(CompressedBytes(one, 32), 4u);
  EXPECT_EQ(CompressedBytes(one, 33), 8u);
  EXPECT_EQ(CompressedBytes(none, 33), 132u);
}

TEST(CompressionSizes, NoneCopiesTheFloats) {
  const CompressionParams none{};
  std::vector<float> grad = {1.5f, -2, 3}, residual = {7, 7, 7}, back(3);
  std::vector<std::byte> out(12);
  Compress(none, grad, residual, out);
  Decompress(none, out, back);
  EXPECT_EQ(back, grad);
  EXPECT_EQ(residual, (std::vector<float>{7, 7, 7}));
}

TEST(CompressionErrors, LengthsAreChecked) {
  const CompressionParams p{CompressionType::kTwoBit, 0.5f};
  std::vector<float> grad(17), residual(16), out_f(17);
  std::vector<std::byte> out(8), short_out(4);
  EXPECT_THROW(Compress(p, grad, residual, out), InvalidArgument);
  residual.resize(17);
  EXPECT_THROW(Compress(p, grad, residual, short_out), InvalidArgument);
  EXPECT_THROW(Decompress(p, short_out, out_f), InvalidArgument);
  try {
    Decompress(p, short_out, out_f);
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("need 8"), std::string::npos) << e.what();
  }
}

TEST(CompressionParamsParse, MxnetDictionaryForm) {
  auto p = ParseCompressionParams({{"type", "2bit"}, {"threshold", "0.25"}});
  EXPECT_EQ(p.type, CompressionType::kTwoBit);
  EXPECT_EQ(p.threshold, 0.25f);
  p = ParseCompressionParams({{"type", "1bit"}});
  EXPECT_EQ(p.type, CompressionType::kOneBit);
  EXPECT_EQ(p.threshold, 0.5f);
  EXPECT_EQ(ParseCompressionParams({{"type", "none"}}).type, CompressionType::kNone);
}

TEST(CompressionParamsParse, BadEntriesAreNamed) {
  const auto error = [](const std::map<std::string, std::string>& m) -> std::string {
    try {
      ParseCompressionParams(m);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error({}).find("'type'"), std::string::npos);
  EXPECT_NE(error({{"type", "3bit"}}).find("'3bit'"), std::string::npos);
  EXPECT_NE(error({{"type", "2bit"}, {"threshold", "abc"}}).find("'threshold'"), std::string::npos);
  EXPECT_NE(error({{"type", "2bit"}, {"threshold", "0"}}).find("'threshold'"), std::string::npos);
  EXPECT_NE(error({{"type", "2bit"}, {"threshold", "-1"}}).find("'threshold'"), std::string::npos);
  EXPECT_NE(error({{"type", "2bit"}, {"beta", "0.9"}}).find("'beta'"), std::string::npos);
}

}  // namespace
}  // namespace tandem::kv
