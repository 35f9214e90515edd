// The element types an optimizer computes in, and the conversions between a
// tensor's storage type and that compute type. Shared by the five optimizer
// kernels so that each reads as MXNet's formula and nothing else.
//
// Precision modes (docs/optimizers.md, "Precision"):
//   kF32        float32 weights, float32 states, float32 arithmetic
//   kF64        float64 weights, float64 states, float64 arithmetic
//   kF16        float16 weights and states, float32 arithmetic, each stored
//               value rounded to float16
// (float16 weights with multi_precision run as kF32 on the float32 master
// copy; see OptimizerBase.)
#pragma once

#include <cstddef>
#include <type_traits>

#include "base/dtype.h"

namespace tandem::kv {

enum class Precision { kF32, kF64, kF16 };

/// The types of one kernel instantiation: W the storage of the weight, G of
/// the gradient, S of the states, C of the arithmetic.
template <typename W, typename G, typename S, typename C>
struct KernelTypes {
  using Weight = W;
  using Grad = G;
  using State = S;
  using Compute = C;
};

/// Calls `f(KernelTypes<...>{})` for `precision`.
template <typename F>
void DispatchPrecision(Precision precision, F&& f) {
  using base::Half;
  switch (precision) {
    case Precision::kF32:
      f(KernelTypes<float, float, float, float>{});
      return;
    case Precision::kF64:
      f(KernelTypes<double, double, double, double>{});
      return;
    case Precision::kF16:
      f(KernelTypes<Half, Half, Half, float>{});
      return;
  }
}

/// Calls `f(std::bool_constant<value>{})`, so that a loop can be compiled
/// once per value of a flag instead of testing it per element.
template <typename F>
void DispatchBool(bool value, F&& f) {
  if (value) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

/// Runs `block(first, count)` over [0, n): whole blocks of kBlock elements,
/// whose count is a compile-time constant, then one shorter tail.
///
/// Why: g++ 12 at -O2 vectorises a loop only when its trip count is a known
/// multiple of the vector width and needs no run-time alias check (see
/// src/base/reduce.cc). So a kernel writes its loop once, over `count`
/// elements from `first`, in a function whose pointers are __restrict, and
/// the whole blocks vectorise.
inline constexpr size_t kKernelBlock = 64;

template <typename Block>
inline void ForEachBlock(size_t n, Block&& block) {
  size_t i = 0;
  for (; i + kKernelBlock <= n; i += kKernelBlock) {
    block(i, std::integral_constant<size_t, kKernelBlock>{});
  }
  if (i < n) block(i, n - i);
}

/// A stored element widened to the compute type C.
template <typename C, typename T>
inline C Load(T value) {
  if constexpr (std::is_same_v<T, base::Half>) {
    return static_cast<C>(base::HalfToFloat(value));
  } else {
    return static_cast<C>(value);
  }
}

/// A computed value rounded to the storage type T (to nearest even).
template <typename T, typename C>
inline T Store(C value) {
  if constexpr (std::is_same_v<T, base::Half>) {
    return base::FloatToHalf(static_cast<float>(value));
  } else {
    return static_cast<T>(value);
  }
}

/// The value a store of `value` into T reads back as: what MXNet's kernels
/// see when they read an element they just wrote.
template <typename T, typename C>
inline C RoundTrip(C value) {
  return Load<C>(Store<T>(value));
}

/// mshadow_op::clip: `x` limited to [-bound, bound]; NaN passes through.
template <typename C>
inline C ClipTo(C x, C bound) {
  return x > bound ? bound : (x < -bound ? -bound : x);
}

}  // namespace tandem::kv
