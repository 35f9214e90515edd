#include "base/dtype.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tandem/error.h"

namespace tandem::base {
namespace {

using ::testing::HasSubstr;

// ---- The table: names, sizes, wire values ---------------------------------

struct DTypeRow {
  DType dtype;
  uint8_t wire;
  const char* name;
  size_t size;
  bool floating;
};

// Written out by hand: a change to any enum value or name breaks the wire
// and must fail here.
const DTypeRow kRows[] = {
    {DType::kF32, 0, "float32", 4, true}, {DType::kF64, 1, "float64", 8, true},
    {DType::kF16, 2, "float16", 2, true}, {DType::kBF16, 3, "bfloat16", 2, true},
    {DType::kI32, 4, "int32", 4, false},  {DType::kI64, 5, "int64", 8, false},
    {DType::kU8, 6, "uint8", 1, false},
};

class DTypeTableTest : public ::testing::TestWithParam<DTypeRow> {};

TEST_P(DTypeTableTest, WireValueNameAndSizeAreStable) {
  const DTypeRow& row = GetParam();
  EXPECT_EQ(static_cast<uint8_t>(row.dtype), row.wire);
  EXPECT_EQ(DTypeFromWire(row.wire), row.dtype);
  EXPECT_EQ(DTypeName(row.dtype), row.name);
  EXPECT_EQ(ParseDType(row.name), row.dtype);
  EXPECT_EQ(DTypeSize(row.dtype), row.size);
  EXPECT_EQ(IsFloatingPoint(row.dtype), row.floating);
}

TEST_P(DTypeTableTest, VisitDTypeYieldsTheStorageType) {
  const DTypeRow& row = GetParam();
  VisitDType(row.dtype, [&]<typename T>(std::type_identity<T>) {
    EXPECT_EQ(sizeof(T), row.size);
    EXPECT_EQ(DTypeOf<T>(), row.dtype);
  });
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, DTypeTableTest, ::testing::ValuesIn(kRows),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(DTypeTest, CountCoversEveryRow) { EXPECT_EQ(kDTypeCount, std::size(kRows)); }

class ParseDTypeErrorTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ParseDTypeErrorTest, NamesTheBadTextAndTheChoices) {
  try {
    ParseDType(GetParam());
    FAIL() << "ParseDType accepted '" << GetParam() << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'" + GetParam() + "'"));
    EXPECT_THAT(e.what(), HasSubstr("bfloat16"));
  }
}

INSTANTIATE_TEST_SUITE_P(BadNames, ParseDTypeErrorTest,
                         ::testing::Values("", "float", "Float32", "FLOAT32", "int8", "float32 ",
                                           " int64", "f32", "half"));

class DTypeFromWireErrorTest : public ::testing::TestWithParam<int> {};

TEST_P(DTypeFromWireErrorTest, UnknownValueIsAProtocolErrorNamingIt) {
  const auto value = static_cast<uint8_t>(GetParam());
  try {
    DTypeFromWire(value);
    FAIL() << "DTypeFromWire accepted " << GetParam();
  } catch (const ProtocolError& e) {
    EXPECT_THAT(e.what(), HasSubstr(std::to_string(GetParam())));
  }
}

INSTANTIATE_TEST_SUITE_P(BadValues, DTypeFromWireErrorTest, ::testing::Values(7, 8, 12, 128, 255));

TEST(DTypeTest, OutOfEnumValueIsRejectedByEveryQuery) {
  const auto bad = static_cast<DType>(42);
  EXPECT_THROW(DTypeSize(bad), InvalidArgument);
  EXPECT_THROW(DTypeName(bad), InvalidArgument);
  EXPECT_THROW(IsFloatingPoint(bad), InvalidArgument);
  EXPECT_THROW(VisitDType(bad, [](auto) { return 0; }), InvalidArgument);
  try {
    DTypeSize(bad);
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("42"));
  }
}

// ---- Independent references ------------------------------------------------

uint32_t FloatBits(float f) { return std::bit_cast<uint32_t>(f); }
float FloatFromBits(uint32_t b) { return std::bit_cast<float>(b); }
bool HalfIsNan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0; }

// The value of a half from its fields, in double.
double HalfValue(uint16_t h) {
  const int sign = (h & 0x8000) ? -1 : 1;
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  if (exponent == 0x1F) return sign * std::numeric_limits<double>::infinity();
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// Round-to-nearest-even onto the ascending list of candidate magnitudes
// (indexed by bit pattern), by comparing distances in double; `overflow`
// is the magnitude from which the result is infinity.
uint16_t NearestByDistance(double magnitude, const std::vector<double>& values, double overflow,
                           uint16_t infinity_bits) {
  if (magnitude >= overflow) return infinity_bits;
  auto it = std::lower_bound(values.begin(), values.end(), magnitude);
  // Above the largest finite value but below `overflow`: the largest wins.
  if (it == values.end()) return static_cast<uint16_t>(values.size() - 1);
  const auto hi = static_cast<uint16_t>(it - values.begin());
  if (*it == magnitude || hi == 0) return hi;
  const auto lo = static_cast<uint16_t>(hi - 1);
  const double below = magnitude - values[lo];
  const double above = *it - magnitude;
  if (below < above) return lo;
  if (above < below) return hi;
  return (lo & 1) == 0 ? lo : hi;
}

const std::vector<double>& PositiveFiniteHalves() {
  static const std::vector<double> values = [] {
    std::vector<double> v;
    for (uint32_t h = 0; h < 0x7C00; ++h) v.push_back(HalfValue(static_cast<uint16_t>(h)));
    return v;
  }();
  return values;
}

uint16_t ReferenceFloatToHalf(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  // 65520 is halfway between 65504 and 65536, the next step of the grid.
  return sign | NearestByDistance(std::fabs(static_cast<double>(f)), PositiveFiniteHalves(),
                                  65520.0, 0x7C00);
}

uint16_t ReferenceFloatToBFloat16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double magnitude = std::fabs(static_cast<double>(f));
  // The bfloat16 grid around |f|: truncation and the next pattern up.
  const auto lo = static_cast<uint16_t>((FloatBits(f) & 0x7FFFFFFF) >> 16);
  const auto hi = static_cast<uint16_t>(lo + 1);
  const double lo_value = FloatFromBits(static_cast<uint32_t>(lo) << 16);
  const double hi_value =
      hi == 0x7F80 ? std::ldexp(1.0, 128) : FloatFromBits(static_cast<uint32_t>(hi) << 16);
  if (magnitude == lo_value) return sign | lo;
  const double below = magnitude - lo_value;
  const double above = hi_value - magnitude;
  if (below < above) return sign | lo;
  if (above < below) return sign | hi;
  return sign | ((lo & 1) == 0 ? lo : hi);
}

// ---- float16 ---------------------------------------------------------------

TEST(HalfTest, EveryBitPatternWidensToItsValue) {
  for (uint32_t i = 0; i < 0x10000; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = HalfToFloat(Half{h});
    if (HalfIsNan(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
      ASSERT_NE(FloatBits(f) & 0x00400000, 0u) << "NaN not quiet for half " << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), HalfValue(h)) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    }
  }
}

TEST(HalfTest, EveryBitPatternRoundTripsThroughFloat) {
  for (uint32_t i = 0; i < 0x10000; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const uint16_t back = FloatToHalf(HalfToFloat(Half{h})).bits;
    // Signalling NaNs come back quiet (bit 9 set); everything else exactly.
    const uint16_t expected = HalfIsNan(h) ? static_cast<uint16_t>(h | 0x0200) : h;
    ASSERT_EQ(back, expected) << "half 0x" << std::hex << h;
  }
}

// Every tie and its neighbours: for each pair of adjacent positive halves,
// the float exactly between them and one float ulp either side.
TEST(HalfTest, RoundsEveryMidpointAndItsNeighboursLikeTheReference) {
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const double mid = (HalfValue(static_cast<uint16_t>(h)) +
                        (h + 1 < 0x7C00 ? HalfValue(static_cast<uint16_t>(h + 1)) : 65536.0)) /
                       2;
    const float exact_mid = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(exact_mid), mid);  // 12 significant bits fit in a float
    for (float f : {std::nextafter(exact_mid, 0.0f), exact_mid,
                    std::nextafter(exact_mid, std::numeric_limits<float>::infinity())}) {
      ASSERT_EQ(FloatToHalf(f).bits, ReferenceFloatToHalf(f)) << f;
      ASSERT_EQ(FloatToHalf(-f).bits, ReferenceFloatToHalf(-f)) << -f;
    }
  }
}

// A sweep across the whole float range (every exponent, many mantissas).
TEST(HalfTest, RoundsASweepOfAllFloatsLikeTheReference) {
  for (uint64_t bits = 0; bits < 0x100000000ull; bits += 65521) {
    const float f = FloatFromBits(static_cast<uint32_t>(bits));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f).bits, ReferenceFloatToHalf(f)) << "float 0x" << std::hex << bits;
  }
}

struct RoundCase {
  const char* name;
  float input;
  uint16_t expected;
};

class FloatToHalfCaseTest : public ::testing::TestWithParam<RoundCase> {};

TEST_P(FloatToHalfCaseTest, RoundsToNearestEven) {
  EXPECT_EQ(FloatToHalf(GetParam().input).bits, GetParam().expected)
      << std::hex << "got 0x" << FloatToHalf(GetParam().input).bits << " expected 0x"
      << GetParam().expected;
}

INSTANTIATE_TEST_SUITE_P(
    Crafted, FloatToHalfCaseTest,
    ::testing::Values(RoundCase{"One", 1.0f, 0x3C00}, RoundCase{"MinusTwo", -2.0f, 0xC000},
                      RoundCase{"PlusZero", 0.0f, 0x0000}, RoundCase{"MinusZero", -0.0f, 0x8000},
                      RoundCase{"Largest", 65504.0f, 0x7BFF},
                      RoundCase{"JustBelowOverflowTie", 65519.996f, 0x7BFF},
                      RoundCase{"OverflowTieGoesToInfinity", 65520.0f, 0x7C00},
                      RoundCase{"Infinity", std::numeric_limits<float>::infinity(), 0x7C00},
                      RoundCase{"MinusInfinity", -std::numeric_limits<float>::infinity(), 0xFC00},
                      RoundCase{"FloatMaxIsInfinity", std::numeric_limits<float>::max(), 0x7C00},
                      // 1 + 2^-11 is halfway between 0x3C00 and 0x3C01: the even one wins.
                      RoundCase{"TieToEvenDown", 1.0f + 0x1p-11f, 0x3C00},
                      // 1 + 3 * 2^-11 is halfway between 0x3C01 and 0x3C02.
                      RoundCase{"TieToEvenUp", 1.0f + 3 * 0x1p-11f, 0x3C02},
                      RoundCase{"AboveTieRoundsUp", 1.0f + 0x1p-11f + 0x1p-20f, 0x3C01},
                      RoundCase{"MantissaCarryBumpsExponent", 2.0f - 0x1p-12f, 0x4000},
                      RoundCase{"SmallestNormal", 0x1p-14f, 0x0400},
                      RoundCase{"SmallestSubnormal", 0x1p-24f, 0x0001},
                      RoundCase{"LargestSubnormal", 1023 * 0x1p-24f, 0x03FF},
                      // 2^-25 is halfway between 0 and the smallest subnormal: even is 0.
                      RoundCase{"SubnormalTieToZero", 0x1p-25f, 0x0000},
                      RoundCase{"AboveSubnormalTie", 0x1p-25f + 0x1p-40f, 0x0001},
                      RoundCase{"SubnormalTieToEvenUp", 3 * 0x1p-25f, 0x0002},
                      // Halfway between the largest subnormal and the smallest normal.
                      RoundCase{"SubnormalCarriesIntoNormal", 2047 * 0x1p-25f, 0x0400},
                      RoundCase{"FarBelowSubnormals", 1e-30f, 0x0000},
                      RoundCase{"FloatSubnormal", 1e-45f, 0x0000},
                      RoundCase{"NegativeSubnormal", -5 * 0x1p-24f, 0x8005}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(HalfTest, NanStaysNanWithSignAndQuietBit) {
  for (uint32_t float_bits : {0x7FC00000u, 0x7F800001u, 0xFFC00000u, 0x7FFFFFFFu, 0xFF812345u}) {
    const uint16_t h = FloatToHalf(FloatFromBits(float_bits)).bits;
    EXPECT_TRUE(HalfIsNan(h)) << std::hex << float_bits << " -> " << h;
    EXPECT_NE(h & 0x0200, 0) << "not quiet: " << std::hex << h;
    EXPECT_EQ((h & 0x8000) != 0, (float_bits & 0x80000000u) != 0);
  }
  // The top ten payload bits survive.
  EXPECT_EQ(FloatToHalf(FloatFromBits(0x7FC02000u)).bits, 0x7E01);
}

// ---- bfloat16 --------------------------------------------------------------

TEST(BFloat16Test, EveryBitPatternWidensExactlyAndRoundTrips) {
  for (uint32_t i = 0; i < 0x10000; ++i) {
    const auto b = static_cast<uint16_t>(i);
    const float f = BFloat16ToFloat(BFloat16{b});
    const bool is_nan = (b & 0x7F80) == 0x7F80 && (b & 0x007F) != 0;
    if (is_nan) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      ASSERT_EQ(FloatBits(f), (static_cast<uint32_t>(b) << 16) | 0x00400000u) << std::hex << b;
      ASSERT_EQ(FloatToBFloat16(f).bits, b | 0x0040) << std::hex << b;
    } else {
      ASSERT_EQ(FloatBits(f), static_cast<uint32_t>(b) << 16) << std::hex << b;
      ASSERT_EQ(FloatToBFloat16(f).bits, b) << std::hex << b;
    }
  }
}

TEST(BFloat16Test, RoundsASweepOfAllFloatsLikeTheReference) {
  for (uint64_t bits = 0; bits < 0x100000000ull; bits += 65521) {
    const float f = FloatFromBits(static_cast<uint32_t>(bits));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToBFloat16(f).bits, ReferenceFloatToBFloat16(f))
        << "float 0x" << std::hex << bits;
  }
}

TEST(BFloat16Test, RoundsEveryMidpointAndItsNeighboursLikeTheReference) {
  for (uint32_t b = 0; b < 0x7F80; b += 7) {
    const uint32_t mid_bits = (b << 16) | 0x8000u;
    for (uint32_t bits : {mid_bits - 1, mid_bits, mid_bits + 1}) {
      const float f = FloatFromBits(bits);
      ASSERT_EQ(FloatToBFloat16(f).bits, ReferenceFloatToBFloat16(f)) << std::hex << bits;
      ASSERT_EQ(FloatToBFloat16(-f).bits, ReferenceFloatToBFloat16(-f)) << std::hex << bits;
    }
  }
}

class FloatToBFloat16CaseTest : public ::testing::TestWithParam<RoundCase> {};

TEST_P(FloatToBFloat16CaseTest, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBFloat16(GetParam().input).bits, GetParam().expected)
      << std::hex << "got 0x" << FloatToBFloat16(GetParam().input).bits << " expected 0x"
      << GetParam().expected;
}

INSTANTIATE_TEST_SUITE_P(
    Crafted, FloatToBFloat16CaseTest,
    ::testing::Values(RoundCase{"One", 1.0f, 0x3F80}, RoundCase{"MinusZero", -0.0f, 0x8000},
                      RoundCase{"TieToEvenDown", 1.0f + 0x1p-8f, 0x3F80},
                      RoundCase{"TieToEvenUp", 1.0f + 3 * 0x1p-8f, 0x3F82},
                      RoundCase{"AboveTie", 1.0f + 0x1p-8f + 0x1p-20f, 0x3F81},
                      RoundCase{"FloatMaxRoundsToInfinity", std::numeric_limits<float>::max(),
                                0x7F80},
                      RoundCase{"BelowOverflowTie", FloatFromBits(0x7F7F7FFFu), 0x7F7F},
                      RoundCase{"Infinity", std::numeric_limits<float>::infinity(), 0x7F80},
                      RoundCase{"MinusInfinity", -std::numeric_limits<float>::infinity(), 0xFF80},
                      RoundCase{"SmallestFloatSubnormal", FloatFromBits(1), 0x0000},
                      RoundCase{"SubnormalTieToZero", FloatFromBits(0x00008000u), 0x0000},
                      RoundCase{"SubnormalTieUp", FloatFromBits(0x00018000u), 0x0002},
                      RoundCase{"SubnormalCarriesIntoNormal", FloatFromBits(0x007FFFFFu), 0x0080}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(BFloat16Test, NanNeverRoundsToInfinity) {
  // A signalling NaN with only low payload bits would become infinity
  // under plain rounding; it must stay NaN.
  for (uint32_t float_bits : {0x7F800001u, 0xFF800001u, 0x7F807FFFu, 0x7FFFFFFFu, 0x7FC00000u}) {
    const uint16_t b = FloatToBFloat16(FloatFromBits(float_bits)).bits;
    EXPECT_EQ(b & 0x7F80, 0x7F80) << std::hex << b;
    EXPECT_NE(b & 0x0040, 0) << "not a quiet NaN: " << std::hex << b;
    EXPECT_EQ((b & 0x8000) != 0, (float_bits & 0x80000000u) != 0);
  }
}

}  // namespace
}  // namespace tandem::base
