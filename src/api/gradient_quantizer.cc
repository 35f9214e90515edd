// tandem::GradientQuantizer (include/tandem/gradient_quantizer.h): checks the
// caller's tensors and hands them to the parameter server's quantisers
// (src/kv/compression/).
#include "tandem/gradient_quantizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <span>

#include "base/dtype.h"
#include "kv/compression/gradient_compression.h"
#include "tandem/error.h"

namespace tandem {
namespace {

kv::CompressionParams Params(const std::string& type, float threshold) {
  kv::CompressionParams p;
  p.type = type == "1bit" ? kv::CompressionType::kOneBit : kv::CompressionType::kTwoBit;
  p.threshold = threshold;
  return p;
}

// Throws unless `t` is of `dtype` with `count` elements.
void Expect(const TensorView& t, DType dtype, size_t count, const char* call, const char* what) {
  if (t.dtype != dtype) {
    throw InvalidArgument(fmt::format("GradientQuantizer::{}: {} is {}, expected {}", call, what,
                                      base::DTypeName(t.dtype), base::DTypeName(dtype)));
  }
  if (static_cast<size_t>(t.num_elements()) != count) {
    throw InvalidArgument(fmt::format("GradientQuantizer::{}: {} has {} elements, expected {}",
                                      call, what, t.num_elements(), count));
  }
}

}  // namespace

GradientQuantizer::GradientQuantizer(const std::map<std::string, std::string>& params) {
  kv::CompressionParams p = kv::ParseCompressionParams(params);
  if (p.type == kv::CompressionType::kNone) {
    throw InvalidArgument(
        "GradientQuantizer: entry 'type' is 'none', expected 2bit or 1bit (nothing to quantise)");
  }
  type_ = p.type == kv::CompressionType::kOneBit ? "1bit" : "2bit";
  threshold_ = p.threshold;
}

size_t GradientQuantizer::QuantizedBytes(size_t count) const {
  return kv::CompressedBytes(Params(type_, threshold_), count);
}

void GradientQuantizer::Quantize(const TensorView& grad, const TensorView& residual,
                                 const TensorView& out) const {
  const auto n = static_cast<size_t>(grad.num_elements());
  Expect(grad, DType::kF32, n, "Quantize", "grad");
  Expect(residual, DType::kF32, n, "Quantize", "residual");
  Expect(out, DType::kU8, QuantizedBytes(n), "Quantize", "out");
  kv::Compress(Params(type_, threshold_), {static_cast<const float*>(grad.data), n},
               {static_cast<float*>(residual.data), n},
               {static_cast<std::byte*>(out.data), QuantizedBytes(n)});
}

void GradientQuantizer::Dequantize(const TensorView& in, const TensorView& out) const {
  const auto n = static_cast<size_t>(out.num_elements());
  Expect(out, DType::kF32, n, "Dequantize", "out");
  Expect(in, DType::kU8, QuantizedBytes(n), "Dequantize", "in");
  kv::Decompress(Params(type_, threshold_),
                 {static_cast<const std::byte*>(in.data), QuantizedBytes(n)},
                 {static_cast<float*>(out.data), n});
}

void GradientQuantizer::DequantizeAdd(const TensorView& in, const TensorView& out) const {
  const auto n = static_cast<size_t>(out.num_elements());
  Expect(out, DType::kF32, n, "DequantizeAdd", "out");
  Expect(in, DType::kU8, QuantizedBytes(n), "DequantizeAdd", "in");
  // Whole words at a time into a block that stays in the cache.
  constexpr size_t kBlock = 4096;  // values; a multiple of 16 and of 32
  const kv::CompressionParams params = Params(type_, threshold_);
  std::array<float, kBlock> block{};
  auto* dest = static_cast<float*>(out.data);
  const auto* words = static_cast<const std::byte*>(in.data);
  for (size_t begin = 0; begin < n; begin += kBlock) {
    const size_t count = std::min(kBlock, n - begin);
    kv::Decompress(params, {words + QuantizedBytes(begin), QuantizedBytes(count)},
                   {block.data(), count});
    for (size_t i = 0; i < count; ++i) dest[begin + i] += block[i];
  }
}

}  // namespace tandem
