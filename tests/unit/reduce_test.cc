#include "base/reduce.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "tandem/error.h"

namespace tandem::base {
namespace {

using ::testing::HasSubstr;

constexpr DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16,
                                DType::kI32, DType::kI64, DType::kU8};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax};

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

float ToFloat(Half h) { return Widen(h); }
float ToFloat(BFloat16 b) { return Widen(b); }
template <typename H>
H FromFloat(float f) {
  return Narrow<H>(f);
}

// ---- The scalar reference: the documented semantics, element by element ----

template <typename F>
F ReferenceFloat(ReduceOp op, F x, F y) {
  switch (op) {
    case ReduceOp::kSum:
      return x + y;
    case ReduceOp::kProd:
      return x * y;
    case ReduceOp::kMin:
      if (std::isnan(x)) return x;
      if (std::isnan(y)) return y;
      return y < x ? y : x;
    case ReduceOp::kMax:
      if (std::isnan(x)) return x;
      if (std::isnan(y)) return y;
      return y > x ? y : x;
  }
  return x;
}

// Integers: the exact result reduced modulo 2^bits, computed in 64-bit
// unsigned arithmetic (wider than any of the element types but int64).
template <typename I>
I ReferenceInt(ReduceOp op, I x, I y) {
  const auto ux = static_cast<uint64_t>(x);
  const auto uy = static_cast<uint64_t>(y);
  switch (op) {
    case ReduceOp::kSum:
      return static_cast<I>(ux + uy);
    case ReduceOp::kProd:
      return static_cast<I>(ux * uy);
    case ReduceOp::kMin:
      return x < y ? x : y;
    case ReduceOp::kMax:
      return x < y ? y : x;
  }
  return x;
}

template <typename T>
T Reference(ReduceOp op, T x, T y) {
  if constexpr (kIsHalf<T>) {
    return FromFloat<T>(ReferenceFloat(op, ToFloat(x), ToFloat(y)));
  } else if constexpr (std::is_floating_point_v<T>) {
    return ReferenceFloat(op, x, y);
  } else {
    return ReferenceInt(op, x, y);
  }
}

template <typename T>
bool IsNan(T v) {
  if constexpr (kIsHalf<T>) {
    return std::isnan(ToFloat(v));
  } else if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

// Equal bits, or both NaN (which NaN a hardware operation returns is not
// part of the contract).
template <typename T>
bool SameElement(T got, T want) {
  if (IsNan(want)) return IsNan(got);
  return std::memcmp(&got, &want, sizeof(T)) == 0;
}

template <typename T>
std::string Show(T v) {
  if constexpr (kIsHalf<T>) {
    return std::to_string(ToFloat(v)) + " (bits " + std::to_string(v.bits) + ")";
  } else {
    return std::to_string(+v);
  }
}

// Random elements: for halves and integers every bit pattern (so NaN,
// infinities, subnormals, overflowing integers all occur); for float and
// double mostly ordinary values with specials mixed in.
template <typename T>
std::vector<T> RandomElements(size_t count, std::mt19937_64& rng) {
  std::vector<T> v(count);
  std::uniform_real_distribution<double> real(-1000.0, 1000.0);
  for (size_t i = 0; i < count; ++i) {
    if constexpr (kIsHalf<T>) {
      v[i] = T{static_cast<uint16_t>(rng())};
    } else if constexpr (std::is_floating_point_v<T>) {
      switch (rng() % 16) {
        case 0:
          v[i] = std::numeric_limits<T>::quiet_NaN();
          break;
        case 1:
          v[i] = std::numeric_limits<T>::infinity();
          break;
        case 2:
          v[i] = -std::numeric_limits<T>::infinity();
          break;
        case 3:
          v[i] = -0.0;
          break;
        case 4:
          v[i] = std::numeric_limits<T>::denorm_min();
          break;
        case 5:
          v[i] = 0.0;  // against case 3's -0.0, tells min(x, y) from min(y, x)
          break;
        default:
          v[i] = static_cast<T>(real(rng));
      }
    } else {
      v[i] = static_cast<T>(rng());
    }
  }
  return v;
}

// ---- Every dtype x op x count, in every aliasing shape ----------------------

using ReduceCase = std::tuple<DType, ReduceOp, size_t>;

class ReduceMatchesReferenceTest : public ::testing::TestWithParam<ReduceCase> {
 protected:
  template <typename T>
  void Check() {
    const DType dtype = std::get<0>(GetParam());
    const ReduceOp op = std::get<1>(GetParam());
    const size_t count = std::get<2>(GetParam());
    std::mt19937_64 rng(static_cast<uint64_t>(dtype) * 1000003 + static_cast<uint64_t>(op) * 101 +
                        count);
    // One element of offset makes the buffers misaligned for vector loads.
    std::vector<T> a_storage = RandomElements<T>(count + 1, rng);
    std::vector<T> b_storage = RandomElements<T>(count + 1, rng);
    const T* a = a_storage.data() + 1;
    const T* b = b_storage.data() + 1;
    std::vector<T> want(count);
    std::vector<T> want_self(count);
    for (size_t i = 0; i < count; ++i) {
      want[i] = Reference(op, a[i], b[i]);
      want_self[i] = Reference(op, a[i], a[i]);
    }
    auto expect_all = [&](const T* got, const std::vector<T>& expected, const char* shape) {
      for (size_t i = 0; i < count; ++i) {
        ASSERT_TRUE(SameElement(got[i], expected[i]))
            << shape << ", element " << i << ": " << Show(a[i]) << " " << ReduceOpName(op) << " "
            << Show(b[i]) << " gave " << Show(got[i]) << ", expected " << Show(expected[i]);
      }
    };

    // Reduce: inout = op(inout, in).
    std::vector<T> inout(a, a + count);
    Reduce(op, dtype, inout.data(), b, count);
    expect_all(inout.data(), want, "Reduce");

    // ReduceInto with a separate output.
    std::vector<T> out(count + 1);
    ReduceInto(op, dtype, out.data() + 1, a, b, count);
    expect_all(out.data() + 1, want, "ReduceInto(out, a, b)");

    // ReduceInto writing over a, and over b (order of operands is kept).
    std::vector<T> over_a(a, a + count);
    ReduceInto(op, dtype, over_a.data(), over_a.data(), b, count);
    expect_all(over_a.data(), want, "ReduceInto(a, a, b)");
    std::vector<T> over_b(b, b + count);
    ReduceInto(op, dtype, over_b.data(), a, over_b.data(), count);
    expect_all(over_b.data(), want, "ReduceInto(b, a, b)");

    // A buffer with itself.
    std::vector<T> self(a, a + count);
    Reduce(op, dtype, self.data(), self.data(), count);
    expect_all(self.data(), want_self, "Reduce(x, x)");
    std::vector<T> self_out(count);
    ReduceInto(op, dtype, self_out.data(), a, a, count);
    expect_all(self_out.data(), want_self, "ReduceInto(out, a, a)");
  }
};

TEST_P(ReduceMatchesReferenceTest, EveryShape) {
  VisitDType(std::get<0>(GetParam()), [this]<typename T>(std::type_identity<T>) { Check<T>(); });
}

INSTANTIATE_TEST_SUITE_P(AllDTypesOpsCounts, ReduceMatchesReferenceTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes),
                                            ::testing::ValuesIn(kAllOps),
                                            ::testing::Values<size_t>(0, 1, 7, 1000, 4099)),
                         [](const auto& param_info) {
                           return std::string(DTypeName(std::get<0>(param_info.param))) + "_" +
                                  std::string(ReduceOpName(std::get<1>(param_info.param))) + "_" +
                                  std::to_string(std::get<2>(param_info.param));
                         });

// ---- Crafted semantics -------------------------------------------------------

template <typename T>
class FloatReduceTest : public ::testing::Test {
 protected:
  static T Make(double v) {
    if constexpr (kIsHalf<T>) {
      return FromFloat<T>(static_cast<float>(v));
    } else {
      return static_cast<T>(v);
    }
  }
  static double Value(T v) {
    if constexpr (kIsHalf<T>) {
      return ToFloat(v);
    } else {
      return v;
    }
  }
  static T Apply(ReduceOp op, double x, double y) {
    T out = Make(x);
    const T in = Make(y);
    Reduce(op, DTypeOf<T>(), &out, &in, 1);
    return out;
  }
};

using FloatTypes = ::testing::Types<float, double, Half, BFloat16>;
TYPED_TEST_SUITE(FloatReduceTest, FloatTypes);

TYPED_TEST(FloatReduceTest, MinAndMaxPropagateNanFromEitherSide) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    EXPECT_TRUE(std::isnan(this->Value(this->Apply(op, nan, 1.0)))) << ReduceOpName(op);
    EXPECT_TRUE(std::isnan(this->Value(this->Apply(op, 1.0, nan)))) << ReduceOpName(op);
    EXPECT_TRUE(std::isnan(this->Value(this->Apply(op, nan, nan)))) << ReduceOpName(op);
  }
  EXPECT_EQ(this->Value(this->Apply(ReduceOp::kMin, 2.0, -3.0)), -3.0);
  EXPECT_EQ(this->Value(this->Apply(ReduceOp::kMax, 2.0, -3.0)), 2.0);
}

TYPED_TEST(FloatReduceTest, EqualZerosKeepTheFirstOperand) {
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    EXPECT_TRUE(std::signbit(this->Value(this->Apply(op, -0.0, 0.0)))) << ReduceOpName(op);
    EXPECT_FALSE(std::signbit(this->Value(this->Apply(op, 0.0, -0.0)))) << ReduceOpName(op);
  }
}

TYPED_TEST(FloatReduceTest, InfinitiesFollowIeee) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(std::isnan(this->Value(this->Apply(ReduceOp::kSum, inf, -inf))));
  EXPECT_TRUE(std::isnan(this->Value(this->Apply(ReduceOp::kProd, inf, 0.0))));
  EXPECT_EQ(this->Value(this->Apply(ReduceOp::kMax, inf, 5.0)), inf);
  EXPECT_EQ(this->Value(this->Apply(ReduceOp::kMin, -inf, 5.0)), -inf);
}

struct HalfSumCase {
  const char* name;
  uint16_t x;
  uint16_t y;
  uint16_t expected;
};

class HalfSumRoundingTest : public ::testing::TestWithParam<HalfSumCase> {};

// The sum is formed in float and rounded once to the nearest even half.
TEST_P(HalfSumRoundingTest, RoundsOnceToNearestEven) {
  Half out{GetParam().x};
  const Half in{GetParam().y};
  Reduce(ReduceOp::kSum, DType::kF16, &out, &in, 1);
  EXPECT_EQ(out.bits, GetParam().expected) << std::hex << "got 0x" << out.bits;
}

INSTANTIATE_TEST_SUITE_P(Crafted, HalfSumRoundingTest,
                         ::testing::Values(
                             // 2048 + 1: halfway between 2048 and 2050, the even mantissa is 2048.
                             HalfSumCase{"TieDown", 0x6800, 0x3C00, 0x6800},
                             // 2048 + 3 = 2051: halfway between 2050 and 2052, even is 2052.
                             HalfSumCase{"TieUp", 0x6800, 0x4200, 0x6802},
                             // 1 + (2^-11 + 2^-21): just above the tie, so it rounds up; a
                             // rounding of y before the add would lose the 2^-21.
                             HalfSumCase{"JustAboveTie", 0x3C00, 0x1001, 0x3C01},
                             // 65504 + 16 = 65520 overflows to infinity; 65504 + 8 does not.
                             HalfSumCase{"Overflow", 0x7BFF, 0x4C00, 0x7C00},
                             HalfSumCase{"NoOverflow", 0x7BFF, 0x4800, 0x7BFF},
                             // Two smallest subnormals make the second smallest.
                             HalfSumCase{"Subnormals", 0x0001, 0x0001, 0x0002},
                             // x + (-x) is +0.
                             HalfSumCase{"Cancellation", 0x4500, 0xC500, 0x0000}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(BFloat16SumTest, RoundsOnceToNearestEven) {
  // Around 256 bfloat16 steps by 2: 256 + 1 ties to 256, 256 + 3 ties to 260.
  BFloat16 out = FloatToBFloat16(256.0f);
  BFloat16 in = FloatToBFloat16(1.0f);
  Reduce(ReduceOp::kSum, DType::kBF16, &out, &in, 1);
  EXPECT_EQ(BFloat16ToFloat(out), 256.0f);
  out = FloatToBFloat16(256.0f);
  in = FloatToBFloat16(3.0f);
  Reduce(ReduceOp::kSum, DType::kBF16, &out, &in, 1);
  EXPECT_EQ(BFloat16ToFloat(out), 260.0f);
}

template <typename T>
class IntegerReduceTest : public ::testing::Test {};

using IntegerTypes = ::testing::Types<int32_t, int64_t, uint8_t>;
TYPED_TEST_SUITE(IntegerReduceTest, IntegerTypes);

TYPED_TEST(IntegerReduceTest, SumAndProdWrapLikeTwosComplement) {
  using T = TypeParam;
  constexpr T kMax = std::numeric_limits<T>::max();
  constexpr T kMin = std::numeric_limits<T>::min();
  T x[3] = {kMax, kMin, kMax};
  const T y[3] = {1, static_cast<T>(kMin == 0 ? 0 : -1), 2};
  Reduce(ReduceOp::kSum, DTypeOf<TypeParam>(), x, y, 3);
  EXPECT_EQ(x[0], kMin);                      // max + 1 wraps to min
  EXPECT_EQ(x[1], kMin == 0 ? T{0} : kMax);   // min - 1 wraps to max
  EXPECT_EQ(x[2], static_cast<T>(kMin + 1));  // max + 2
  T p[2] = {kMax, kMin};
  const T q[2] = {2, static_cast<T>(kMin == 0 ? 2 : -1)};
  Reduce(ReduceOp::kProd, DTypeOf<TypeParam>(), p, q, 2);
  EXPECT_EQ(p[0], static_cast<T>(-2));  // 2 * max = -2 mod 2^bits
  EXPECT_EQ(p[1], kMin);                // min * -1 = min (or 0 * 2)
}

TYPED_TEST(IntegerReduceTest, MinAndMaxCompareAsTheType) {
  using T = TypeParam;
  T x[2] = {std::numeric_limits<T>::max(), std::numeric_limits<T>::min()};
  const T y[2] = {std::numeric_limits<T>::min(), std::numeric_limits<T>::max()};
  T m[2] = {x[0], x[1]};
  Reduce(ReduceOp::kMin, DTypeOf<T>(), m, y, 2);
  EXPECT_EQ(m[0], std::numeric_limits<T>::min());
  EXPECT_EQ(m[1], std::numeric_limits<T>::min());
  Reduce(ReduceOp::kMax, DTypeOf<T>(), x, y, 2);
  EXPECT_EQ(x[0], std::numeric_limits<T>::max());
  EXPECT_EQ(x[1], std::numeric_limits<T>::max());
}

// ---- Scale -------------------------------------------------------------------

using ScaleCase = std::tuple<DType, size_t>;

class ScaleTest : public ::testing::TestWithParam<ScaleCase> {};

TEST_P(ScaleTest, MultipliesInDoubleAndRoundsOnceToTheType) {
  const DType dtype = std::get<0>(GetParam());
  const size_t count = std::get<1>(GetParam());
  const double factor = 1.0 / 3.0;
  VisitDType(dtype, [&]<typename T>(std::type_identity<T>) {
    if constexpr (std::is_floating_point_v<T> || kIsHalf<T>) {
      std::mt19937_64 rng(count);
      std::vector<T> data = RandomElements<T>(count, rng);
      std::vector<T> want(count);
      for (size_t i = 0; i < count; ++i) {
        if constexpr (kIsHalf<T>) {
          want[i] =
              FromFloat<T>(static_cast<float>(static_cast<double>(ToFloat(data[i])) * factor));
        } else {
          want[i] = static_cast<T>(static_cast<double>(data[i]) * factor);
        }
      }
      Scale(dtype, data.data(), count, factor);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_TRUE(SameElement(data[i], want[i]))
            << "element " << i << ": got " << Show(data[i]) << ", expected " << Show(want[i]);
      }
    } else {
      FAIL() << "only floating-point dtypes are instantiated";
    }
  });
}

INSTANTIATE_TEST_SUITE_P(FloatDTypes, ScaleTest,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kF64, DType::kF16,
                                                              DType::kBF16),
                                            ::testing::Values<size_t>(0, 1, 7, 1000, 4099)),
                         [](const auto& param_info) {
                           return std::string(DTypeName(std::get<0>(param_info.param))) + "_" +
                                  std::to_string(std::get<1>(param_info.param));
                         });

TEST(ScaleTest, SumThenScaleIsTheAverage) {
  float x[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  const float y[4] = {3.0f, 4.0f, 5.0f, 6.0f};
  Reduce(ReduceOp::kSum, DType::kF32, x, y, 4);
  Scale(DType::kF32, x, 4, 0.5);
  EXPECT_THAT(x, ::testing::ElementsAre(2.0f, 3.0f, 4.0f, 5.0f));
}

class ScaleIntegerTest : public ::testing::TestWithParam<DType> {};

TEST_P(ScaleIntegerTest, RejectsIntegersNamingTheDType) {
  int64_t data[2] = {4, 8};
  try {
    Scale(GetParam(), data, 1, 0.5);
    FAIL() << "Scale accepted " << DTypeName(GetParam());
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr(std::string(DTypeName(GetParam()))));
  }
  EXPECT_EQ(data[0], 4);
}

INSTANTIATE_TEST_SUITE_P(IntegerDTypes, ScaleIntegerTest,
                         ::testing::Values(DType::kI32, DType::kI64, DType::kU8));

// ---- Argument checks ---------------------------------------------------------

TEST(ReduceArgumentsTest, PartialOverlapIsRejectedAndNothingChanges) {
  std::vector<float> buffer = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<float> before = buffer;
  EXPECT_THROW(Reduce(ReduceOp::kSum, DType::kF32, buffer.data(), buffer.data() + 1, 4),
               InvalidArgument);
  EXPECT_THROW(ReduceInto(ReduceOp::kSum, DType::kF32, buffer.data() + 2, buffer.data(),
                          buffer.data() + 4, 4),
               InvalidArgument);
  EXPECT_EQ(buffer, before);
  try {
    Reduce(ReduceOp::kSum, DType::kF32, buffer.data() + 1, buffer.data(), 4);
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("overlap"));
  }
  // Adjacent buffers do not overlap.
  Reduce(ReduceOp::kSum, DType::kF32, buffer.data(), buffer.data() + 4, 4);
  EXPECT_THAT(buffer, ::testing::ElementsAre(6, 8, 10, 12, 5, 6, 7, 8));
}

TEST(ReduceArgumentsTest, NullBuffersAreRejectedUnlessEmpty) {
  float x = 1.0f;
  EXPECT_THROW(Reduce(ReduceOp::kSum, DType::kF32, nullptr, &x, 1), InvalidArgument);
  EXPECT_THROW(Reduce(ReduceOp::kSum, DType::kF32, &x, nullptr, 1), InvalidArgument);
  EXPECT_THROW(Scale(DType::kF32, nullptr, 1, 2.0), InvalidArgument);
  EXPECT_NO_THROW(Reduce(ReduceOp::kSum, DType::kF32, nullptr, nullptr, 0));
  EXPECT_NO_THROW(Scale(DType::kF32, nullptr, 0, 2.0));
  EXPECT_EQ(x, 1.0f);
}

TEST(ReduceArgumentsTest, BadEnumsAreRejectedBeforeTouchingData) {
  float x = 1.0f;
  const float y = 2.0f;
  EXPECT_THROW(Reduce(static_cast<ReduceOp>(9), DType::kF32, &x, &y, 1), InvalidArgument);
  EXPECT_THROW(Reduce(ReduceOp::kSum, static_cast<DType>(9), &x, &y, 1), InvalidArgument);
  EXPECT_EQ(x, 1.0f);
}

// ---- Names and wire values -----------------------------------------------------

struct OpRow {
  ReduceOp op;
  uint8_t wire;
  const char* name;
};

class ReduceOpTableTest : public ::testing::TestWithParam<OpRow> {};

TEST_P(ReduceOpTableTest, WireValueAndNameAreStable) {
  EXPECT_EQ(static_cast<uint8_t>(GetParam().op), GetParam().wire);
  EXPECT_EQ(ReduceOpFromWire(GetParam().wire), GetParam().op);
  EXPECT_EQ(ReduceOpName(GetParam().op), GetParam().name);
  EXPECT_EQ(ParseReduceOp(GetParam().name), GetParam().op);
}

INSTANTIATE_TEST_SUITE_P(AllOps, ReduceOpTableTest,
                         ::testing::Values(OpRow{ReduceOp::kSum, 0, "sum"},
                                           OpRow{ReduceOp::kProd, 1, "prod"},
                                           OpRow{ReduceOp::kMin, 2, "min"},
                                           OpRow{ReduceOp::kMax, 3, "max"}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(ReduceOpTest, UnknownNamesAndWireValuesAreNamedInTheError) {
  for (const char* bad : {"avg", "SUM", "", "mean"}) {
    try {
      ParseReduceOp(bad);
      FAIL() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string("'") + bad + "'"));
    }
  }
  for (int bad : {4, 17, 255}) {
    try {
      ReduceOpFromWire(static_cast<uint8_t>(bad));
      FAIL() << "accepted " << bad;
    } catch (const ProtocolError& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::to_string(bad)));
    }
  }
  EXPECT_THROW(ReduceOpName(static_cast<ReduceOp>(4)), InvalidArgument);
}

}  // namespace
}  // namespace tandem::base
