// Element types of the tensors tandem moves and reduces, and the two 16-bit
// floating-point formats C++ lacks.
//
// A DType's numeric value travels on the wire (PS requests, collective
// headers), so the values below never change; a new type takes the next
// free value. docs/dtypes.md lists them with their sizes and the rounding
// rules of the conversions here.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "tandem/tensor.h"

namespace tandem::base {

/// The element type of the public API (include/tandem/tensor.h); its value
/// is the wire encoding (one byte).
using DType = ::tandem::DType;

/// The number of DType values; every wire value below it is valid.
inline constexpr uint8_t kDTypeCount = 7;

/// IEEE-754 binary16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa
/// bits. Only storage: arithmetic converts to float first.
struct Half {
  uint16_t bits;
};

/// bfloat16: 1 sign bit, 8 exponent bits (bias 127), 7 mantissa bits; the
/// upper 16 bits of a binary32. Only storage, like Half.
struct BFloat16 {
  uint16_t bits;
};

static_assert(sizeof(Half) == 2 && std::is_trivially_copyable_v<Half>);
static_assert(sizeof(BFloat16) == 2 && std::is_trivially_copyable_v<BFloat16>);

/// Bytes per element of `dtype` (1, 2, 4 or 8). Throws InvalidArgument for a
/// value outside the enum.
size_t DTypeSize(DType dtype);

/// The numpy/MXNet name of `dtype` ("float32", "bfloat16", "uint8", ...).
/// Throws InvalidArgument for a value outside the enum.
std::string_view DTypeName(DType dtype);

/// The DType named `name` (exactly one of DTypeName's spellings). Throws
/// InvalidArgument quoting `name` and listing the accepted names.
DType ParseDType(std::string_view name);

/// The DType whose wire value is `value`. Throws ProtocolError naming the
/// value when no DType has it (a peer sent garbage or a newer protocol).
DType DTypeFromWire(uint8_t value);

/// True for kF32, kF64, kF16 and kBF16.
bool IsFloatingPoint(DType dtype);

// ---------------------------------------------------------------------------
// Conversions. All are pure functions of their argument, callable from any
// thread, and never throw. They are inline so that the loops of reduce.cc
// can vectorise them; each is written without data-dependent branches for
// the same reason.
//
// NaN rule, for every conversion: a NaN becomes a quiet NaN of the same sign
// that keeps the top bits of the payload that fit. Round-tripping a quiet
// NaN through float therefore returns the same bits; a signalling one comes
// back quiet.
// ---------------------------------------------------------------------------

/// Widens a half to float. Exact for every non-NaN value (subnormals
/// included).
inline float HalfToFloat(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1Fu;
  const uint32_t mantissa = h.bits & 0x3FFu;
  // Normal numbers: move exponent and mantissa into place and rebias the
  // exponent from 15 to 127.
  const uint32_t normal = ((exponent + (127 - 15)) << 23) | (mantissa << 13);
  // Infinity keeps a zero mantissa; a NaN's mantissa gets the quiet bit.
  const uint32_t quiet = mantissa != 0 ? 0x00400000u : 0u;
  const uint32_t special = 0x7F800000u | (mantissa << 13) | quiet;
  // Subnormals are mantissa * 2^-24, exact in float. The choice is a bit
  // mask, not a ?:, because g++ sinks a float operation whose result a ?:
  // may discard into a branch (it "could trap"), and a branch stops the
  // loop from vectorising. FloatToHalf selects with masks for that reason.
  const float subnormal_value = static_cast<float>(static_cast<int32_t>(mantissa)) * 0x1p-24f;
  const uint32_t subnormal = std::bit_cast<uint32_t>(subnormal_value);
  const uint32_t subnormal_mask = 0u - static_cast<uint32_t>(exponent == 0);
  const uint32_t wide = exponent == 0x1F ? special : normal;
  const uint32_t magnitude = (subnormal & subnormal_mask) | (wide & ~subnormal_mask);
  return std::bit_cast<float>(sign | magnitude);
}

/// Narrows a float to the nearest half, ties to even. Magnitudes at or above
/// 65520 (halfway between the largest half, 65504, and 2^16) become
/// infinity; magnitudes below 2^-14 become subnormal halves or zero.
inline Half FloatToHalf(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7FFFFFFFu;

  // Normal halves (2^-14 <= |f| < 65520): rebias the exponent from 127 to
  // 15, then drop 13 mantissa bits rounding to nearest even. Adding 0xFFF
  // plus the lowest kept bit carries exactly when the dropped part is above
  // half, or exactly half with an odd kept part; a carry out of the
  // mantissa correctly bumps the exponent.
  const uint32_t rebased = magnitude - ((127u - 15u) << 23);
  const uint32_t kept_lsb = (rebased >> 13) & 1u;
  const uint32_t normal = (rebased + 0xFFFu + kept_lsb) >> 13;

  // Subnormal halves (|f| < 2^-14) are multiples of 2^-24. Adding 0.5f,
  // whose ulp is exactly 2^-24, makes the FPU round |f| to that grid (to
  // nearest even, the default mode); the multiple is then the low bits. A
  // result of 1024 is the smallest normal half, which is right.
  const float shifted = std::bit_cast<float>(magnitude) + 0.5f;
  const uint32_t subnormal = std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(0.5f);
  const uint32_t subnormal_mask = 0u - static_cast<uint32_t>(magnitude < 0x38800000u);  // 2^-14

  // 0x477FF000 is 65520: it and everything above rounds to infinity.
  const uint32_t infinity_mask = 0u - static_cast<uint32_t>(magnitude >= 0x477FF000u);
  const uint32_t nan_mask = 0u - static_cast<uint32_t>(magnitude > 0x7F800000u);
  const uint32_t nan = 0x7E00u | ((magnitude >> 13) & 0x3FFu);

  uint32_t result = (subnormal & subnormal_mask) | (normal & ~subnormal_mask);
  result = (0x7C00u & infinity_mask) | (result & ~infinity_mask);
  result = (nan & nan_mask) | (result & ~nan_mask);
  return Half{static_cast<uint16_t>(sign | result)};
}

/// Widens a bfloat16 to float. Exact for every non-NaN value.
inline float BFloat16ToFloat(BFloat16 b) {
  const uint32_t bits = static_cast<uint32_t>(b.bits) << 16;
  const bool is_nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return std::bit_cast<float>(bits | (is_nan ? 0x00400000u : 0u));
}

/// Narrows a float to the nearest bfloat16, ties to even. Magnitudes at or
/// above the midpoint between the largest bfloat16 and 2^128 become
/// infinity; float subnormals round like any other value.
inline BFloat16 FloatToBFloat16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const bool is_nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  // Same carry argument as FloatToHalf's normal case, on 16 dropped bits; a
  // carry out of the largest finite value lands exactly on infinity.
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t nan = (bits >> 16) | 0x0040u;
  return BFloat16{static_cast<uint16_t>(is_nan ? nan : rounded)};
}

/// A Half or BFloat16 widened to float (HalfToFloat, BFloat16ToFloat).
template <typename H>
requires std::is_same_v<H, Half> || std::is_same_v<H, BFloat16>
inline float Widen(H h) {
  if constexpr (std::is_same_v<H, Half>) {
    return HalfToFloat(h);
  } else {
    return BFloat16ToFloat(h);
  }
}

/// A float narrowed to Half or BFloat16 (FloatToHalf, FloatToBFloat16).
template <typename H>
requires std::is_same_v<H, Half> || std::is_same_v<H, BFloat16>
inline H Narrow(float f) {
  if constexpr (std::is_same_v<H, Half>) {
    return FloatToHalf(f);
  } else {
    return FloatToBFloat16(f);
  }
}

// ---------------------------------------------------------------------------
// Static dispatch.
// ---------------------------------------------------------------------------

/// The C++ storage type of each DType: float, double, Half, BFloat16,
/// int32_t, int64_t, uint8_t.
template <typename T>
inline constexpr bool kIsElementType =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
    std::is_same_v<T, BFloat16> || std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t> ||
    std::is_same_v<T, uint8_t>;

/// The DType stored as T.
template <typename T>
requires kIsElementType<T>
constexpr DType DTypeOf() {
  if constexpr (std::is_same_v<T, float>) return DType::kF32;
  if constexpr (std::is_same_v<T, double>) return DType::kF64;
  if constexpr (std::is_same_v<T, Half>) return DType::kF16;
  if constexpr (std::is_same_v<T, BFloat16>) return DType::kBF16;
  if constexpr (std::is_same_v<T, int32_t>) return DType::kI32;
  if constexpr (std::is_same_v<T, int64_t>) return DType::kI64;
  if constexpr (std::is_same_v<T, uint8_t>) return DType::kU8;
}

namespace detail {
/// Throws InvalidArgument naming a value outside the DType enum.
[[noreturn]] void ThrowBadDType(DType dtype);
}  // namespace detail

/// Calls `visitor(std::type_identity<T>{})` with T the storage type of
/// `dtype` and returns what it returns; every branch must return the same
/// type. Lets per-dtype code be written once as a generic lambda. Throws
/// InvalidArgument for a value outside the enum.
template <typename Visitor>
decltype(auto) VisitDType(DType dtype, Visitor&& visitor) {
  switch (dtype) {
    case DType::kF32:
      return visitor(std::type_identity<float>{});
    case DType::kF64:
      return visitor(std::type_identity<double>{});
    case DType::kF16:
      return visitor(std::type_identity<Half>{});
    case DType::kBF16:
      return visitor(std::type_identity<BFloat16>{});
    case DType::kI32:
      return visitor(std::type_identity<int32_t>{});
    case DType::kI64:
      return visitor(std::type_identity<int64_t>{});
    case DType::kU8:
      return visitor(std::type_identity<uint8_t>{});
  }
  detail::ThrowBadDType(dtype);
}

}  // namespace tandem::base
