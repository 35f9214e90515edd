// Tensors as tandem's API sees them: a non-owning view of caller memory
// (pointer, element type, shape). tandem never frees or resizes a tensor it
// is given; the caller keeps the memory alive until the call (or, for
// asynchronous calls, the returned handle) completes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <vector>

namespace tandem {

/// An element type. The value is also the wire encoding (one byte), so the
/// values never change; a new type takes the next free value.
/// docs/dtypes.md lists them with sizes and conversion rules.
enum class DType : uint8_t {
  kF32 = 0,   ///< "float32": IEEE-754 binary32
  kF64 = 1,   ///< "float64": IEEE-754 binary64
  kF16 = 2,   ///< "float16": IEEE-754 binary16
  kBF16 = 3,  ///< "bfloat16": the upper half of a binary32
  kI32 = 4,   ///< "int32": two's complement
  kI64 = 5,   ///< "int64": two's complement
  kU8 = 6,    ///< "uint8"
};

/// Bytes per element of `dtype`; 0 for a value outside the enum.
constexpr size_t ElementSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF64:
      return 8;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kU8:
      return 1;
  }
  return 0;
}

/// A non-owning view of a dense, contiguous (row-major) tensor.
///
/// Thread-safety: a plain value; the memory it points to is the caller's.
struct TensorView {
  void* data = nullptr;        ///< first element; may be null when empty
  DType dtype = DType::kF32;   ///< element type
  std::vector<int64_t> shape;  ///< dimensions; {} is a scalar (1 element)

  /// The product of the dimensions (1 for a scalar, 0 if any dimension is 0).
  int64_t num_elements() const {
    return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  }
  /// num_elements() times the element size.
  size_t num_bytes() const { return static_cast<size_t>(num_elements()) * ElementSize(dtype); }
};

}  // namespace tandem
