#include "base/reduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "tandem/error.h"

namespace tandem::base {
namespace {

constexpr std::array<std::string_view, kReduceOpCount> kOpNames = {"sum", "prod", "min", "max"};

// How the loops are vectorised. g++ 12 at -O2 uses the "very cheap" cost
// model, which vectorises a loop only when its trip count is a known
// multiple of the vector width and needs no run-time alias check. So every
// kernel walks fixed-size blocks through __restrict pointers and finishes
// with a scalar tail shorter than one block. Halves are widened into two
// float blocks on the stack, combined there and narrowed back; reading a
// whole block before writing it is what lets `out` be the same buffer as an
// input.
constexpr size_t kNativeBlock = 64;
constexpr size_t kHalfBlock = 256;

// ---- The operators, on one element -------------------------------------

template <typename T>
struct SumOp {
  T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      // Unsigned arithmetic wraps by definition; converting back is modular
      // in C++20. uint8_t promotes to int, where 255 + 255 cannot overflow.
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(x) + static_cast<U>(y));
    } else {
      return x + y;
    }
  }
};

template <typename T>
struct ProdOp {
  T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      // As SumOp; uint8_t promotes to int, where 255 * 255 cannot overflow.
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(x) * static_cast<U>(y));
    } else {
      return x * y;
    }
  }
};

// std::isnan compiles to an unordered compare, which the vectoriser turns
// into a lane mask; the ?: chains become selects.
template <typename T>
struct MinOp {
  T operator()(T x, T y) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(x)) return x;
      if (std::isnan(y)) return y;
    }
    return y < x ? y : x;
  }
};

template <typename T>
struct MaxOp {
  T operator()(T x, T y) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(x)) return x;
      if (std::isnan(y)) return y;
    }
    return x < y ? y : x;
  }
};

// ---- Kernels for types the CPU computes in directly ---------------------
//
// Three shapes, because __restrict may only promise what is true:
// out = op(a, b) on three distinct buffers; x = op(x, y) and x = op(y, x)
// when the output is one of the inputs; x = op(x, x) when all coincide.

template <typename T, typename Op>
void CombineDistinct(T* __restrict out, const T* __restrict a, const T* __restrict b, size_t count,
                     Op op) {
  size_t i = 0;
  for (; i + kNativeBlock <= count; i += kNativeBlock) {
    for (size_t j = 0; j < kNativeBlock; ++j) out[i + j] = op(a[i + j], b[i + j]);
  }
  for (; i < count; ++i) out[i] = op(a[i], b[i]);
}

// kOutputFirst: x[i] = op(x[i], y[i]); otherwise x[i] = op(y[i], x[i]).
template <bool kOutputFirst, typename T, typename Op>
void CombineInPlace(T* __restrict x, const T* __restrict y, size_t count, Op op) {
  auto apply = [&op](T xi, T yi) { return kOutputFirst ? op(xi, yi) : op(yi, xi); };
  size_t i = 0;
  for (; i + kNativeBlock <= count; i += kNativeBlock) {
    for (size_t j = 0; j < kNativeBlock; ++j) x[i + j] = apply(x[i + j], y[i + j]);
  }
  for (; i < count; ++i) x[i] = apply(x[i], y[i]);
}

template <typename T, typename Op>
void CombineSelf(T* __restrict x, size_t count, Op op) {
  size_t i = 0;
  for (; i + kNativeBlock <= count; i += kNativeBlock) {
    for (size_t j = 0; j < kNativeBlock; ++j) x[i + j] = op(x[i + j], x[i + j]);
  }
  for (; i < count; ++i) x[i] = op(x[i], x[i]);
}

template <typename T, typename Op>
void CombineNative(T* out, const T* a, const T* b, size_t count, Op op) {
  if (out == a && out == b) {
    CombineSelf(out, count, op);
  } else if (out == a) {
    CombineInPlace<true>(out, b, count, op);
  } else if (out == b) {
    CombineInPlace<false>(out, a, count, op);
  } else {
    CombineDistinct(out, a, b, count, op);
  }
}

// ---- Kernels for float16 and bfloat16 -----------------------------------

template <typename H, typename FloatOp>
void CombineHalf(H* out, const H* a, const H* b, size_t count, FloatOp op) {
  size_t i = 0;
  for (; i + kHalfBlock <= count; i += kHalfBlock) {
    float wa[kHalfBlock];
    float wb[kHalfBlock];
    for (size_t j = 0; j < kHalfBlock; ++j) wa[j] = Widen(a[i + j]);
    for (size_t j = 0; j < kHalfBlock; ++j) wb[j] = Widen(b[i + j]);
    for (size_t j = 0; j < kHalfBlock; ++j) wa[j] = op(wa[j], wb[j]);
    for (size_t j = 0; j < kHalfBlock; ++j) out[i + j] = Narrow<H>(wa[j]);
  }
  for (; i < count; ++i) out[i] = Narrow<H>(op(Widen(a[i]), Widen(b[i])));
}

// ---- Dispatch ------------------------------------------------------------

template <typename T>
void Combine(ReduceOp op, T* out, const T* a, const T* b, size_t count) {
  constexpr bool kHalf = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
  using Compute = std::conditional_t<kHalf, float, T>;
  auto run = [&](auto element_op) {
    if constexpr (kHalf) {
      CombineHalf(out, a, b, count, element_op);
    } else {
      CombineNative(out, a, b, count, element_op);
    }
  };
  switch (op) {
    case ReduceOp::kSum:
      return run(SumOp<Compute>{});
    case ReduceOp::kProd:
      return run(ProdOp<Compute>{});
    case ReduceOp::kMin:
      return run(MinOp<Compute>{});
    case ReduceOp::kMax:
      return run(MaxOp<Compute>{});
  }
  throw InvalidArgument(fmt::format("reduce op value {} is not a ReduceOp (expected 0..{})",
                                    static_cast<unsigned>(op), kReduceOpCount - 1));
}

// The bytes of `count` elements; throws when that does not fit in size_t.
size_t ByteLength(const char* what, DType dtype, size_t count) {
  const size_t size = DTypeSize(dtype);
  if (count > std::numeric_limits<size_t>::max() / size) {
    throw InvalidArgument(fmt::format("{}: {} elements of {} exceed the address space", what, count,
                                      DTypeName(dtype)));
  }
  return size * count;
}

void RequireBuffer(const char* what, const char* name, const void* p, size_t count) {
  if (p == nullptr && count > 0) {
    throw InvalidArgument(
        fmt::format("{}: buffer '{}' is null but count is {}", what, name, count));
  }
}

// Two buffers of `bytes` bytes must coincide or be disjoint.
void RequireNoPartialOverlap(const char* what, const char* name_x, const void* x,
                             const char* name_y, const void* y, size_t bytes) {
  if (x == y || bytes == 0) return;
  const auto px = reinterpret_cast<uintptr_t>(x);
  const auto py = reinterpret_cast<uintptr_t>(y);
  const uintptr_t distance = px > py ? px - py : py - px;
  if (distance < bytes) {
    throw InvalidArgument(fmt::format(
        "{}: buffers '{}' and '{}' overlap partially ({} bytes apart, each {} bytes long); "
        "they must be the same buffer or disjoint",
        what, name_x, name_y, distance, bytes));
  }
}

}  // namespace

std::string_view ReduceOpName(ReduceOp op) {
  const auto index = static_cast<size_t>(op);
  if (index >= kOpNames.size()) {
    throw InvalidArgument(fmt::format("reduce op value {} is not a ReduceOp (expected 0..{})",
                                      index, kReduceOpCount - 1));
  }
  return kOpNames[index];
}

ReduceOp ParseReduceOp(std::string_view name) {
  for (size_t i = 0; i < kOpNames.size(); ++i) {
    if (kOpNames[i] == name) return static_cast<ReduceOp>(i);
  }
  throw InvalidArgument(
      fmt::format("unknown reduce op '{}' (expected one of sum, prod, min, max)", name));
}

ReduceOp ReduceOpFromWire(uint8_t value) {
  if (value >= kReduceOpCount) {
    throw ProtocolError(fmt::format("reduce op wire value {} is unknown (expected 0..{})",
                                    static_cast<unsigned>(value), kReduceOpCount - 1));
  }
  return static_cast<ReduceOp>(value);
}

void Reduce(ReduceOp op, DType dtype, void* inout, const void* in, size_t count) {
  ReduceInto(op, dtype, inout, inout, in, count);
}

void ReduceInto(ReduceOp op, DType dtype, void* out, const void* a, const void* b, size_t count) {
  constexpr const char* kWhat = "ReduceInto";
  const size_t bytes = ByteLength(kWhat, dtype, count);
  RequireBuffer(kWhat, "out", out, count);
  RequireBuffer(kWhat, "a", a, count);
  RequireBuffer(kWhat, "b", b, count);
  RequireNoPartialOverlap(kWhat, "out", out, "a", a, bytes);
  RequireNoPartialOverlap(kWhat, "out", out, "b", b, bytes);
  ReduceOpName(op);  // validates op before any element is touched
  if (count == 0) return;
  VisitDType(dtype, [&]<typename T>(std::type_identity<T>) {
    Combine(op, static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), count);
  });
}

void Scale(DType dtype, void* data, size_t count, double factor) {
  constexpr const char* kWhat = "Scale";
  ByteLength(kWhat, dtype, count);
  if (!IsFloatingPoint(dtype)) {
    throw InvalidArgument(fmt::format(
        "Scale: dtype {} is not a floating-point type (expected float32, float64, float16 or "
        "bfloat16)",
        DTypeName(dtype)));
  }
  RequireBuffer(kWhat, "data", data, count);
  if (count == 0) return;
  VisitDType(dtype, [&]<typename T>(std::type_identity<T>) {
    if constexpr (std::is_floating_point_v<T>) {
      T* __restrict x = static_cast<T*>(data);
      auto scale = [factor](T v) { return static_cast<T>(static_cast<double>(v) * factor); };
      size_t i = 0;
      for (; i + kNativeBlock <= count; i += kNativeBlock) {
        for (size_t j = 0; j < kNativeBlock; ++j) x[i + j] = scale(x[i + j]);
      }
      for (; i < count; ++i) x[i] = scale(x[i]);
    } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      T* x = static_cast<T*>(data);
      auto scale = [factor](float v) {
        return static_cast<float>(static_cast<double>(v) * factor);
      };
      size_t i = 0;
      for (; i < count; i += kHalfBlock) {
        const size_t n = std::min(kHalfBlock, count - i);
        float w[kHalfBlock];
        if (n == kHalfBlock) {
          for (size_t j = 0; j < kHalfBlock; ++j) w[j] = scale(Widen(x[i + j]));
          for (size_t j = 0; j < kHalfBlock; ++j) x[i + j] = Narrow<T>(w[j]);
        } else {
          for (size_t j = 0; j < n; ++j) x[i + j] = Narrow<T>(scale(Widen(x[i + j])));
        }
      }
    }
    // Integer types were rejected above.
  });
}

}  // namespace tandem::base
