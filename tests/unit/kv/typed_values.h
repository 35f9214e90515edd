// Tensors of any dtype built from and read back as doubles, for tests that
// check exact closed-form results (the values used are exactly
// representable in every dtype tested).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "base/dtype.h"
#include "tandem/tensor.h"

namespace tandem::testing {

inline void SetAt(DType t, void* data, size_t i, double v) {
  switch (t) {
    case DType::kF32:
      static_cast<float*>(data)[i] = static_cast<float>(v);
      break;
    case DType::kF64:
      static_cast<double*>(data)[i] = v;
      break;
    case DType::kF16:
      static_cast<base::Half*>(data)[i] = base::FloatToHalf(static_cast<float>(v));
      break;
    case DType::kI32:
      static_cast<int32_t*>(data)[i] = static_cast<int32_t>(v);
      break;
    case DType::kI64:
      static_cast<int64_t*>(data)[i] = static_cast<int64_t>(v);
      break;
    default:
      break;
  }
}

inline double GetAt(DType t, const void* data, size_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(data)[i];
    case DType::kF64:
      return static_cast<const double*>(data)[i];
    case DType::kF16:
      return base::HalfToFloat(static_cast<const base::Half*>(data)[i]);
    case DType::kI32:
      return static_cast<const int32_t*>(data)[i];
    case DType::kI64:
      return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    default:
      return 0;
  }
}

// An owned tensor.
struct Tensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;

  Tensor(DType t, std::vector<int64_t> s, const std::function<double(size_t)>& fill = nullptr)
      : dtype(t), shape(std::move(s)) {
    bytes.resize(static_cast<size_t>(view().num_elements()) * ElementSize(t));
    for (size_t i = 0; i < size(); ++i) SetAt(dtype, bytes.data(), i, fill ? fill(i) : 0.0);
  }
  size_t size() const {
    size_t n = 1;
    for (auto d : shape) n *= static_cast<size_t>(d);
    return n;
  }
  TensorView view() { return TensorView{bytes.data(), dtype, shape}; }
  double at(size_t i) const { return GetAt(dtype, bytes.data(), i); }
};

}  // namespace tandem::testing
