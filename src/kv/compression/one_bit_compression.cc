// MXNet's 1-bit gradient compression (src/kvstore/gradient_compression-inl.h
// in MXNet 1.9, added by apache/mxnet#17952), bit for bit.
// docs/gradient-compression.md, "1bit":
//
// Value i lives in byte i / 8 of the output, bit 7 - i % 8 of that byte
// (the first value in the highest bit). The gradient is added into the
// residual; a residual above the threshold sends bit 1, which the receiver
// reads as +1, and 1 is subtracted from the residual; otherwise bit 0 is
// sent, read as -1, and 1 is added to the residual. The threshold decides
// the sign only: the values sent are always +1 and -1.
#include <cstdint>

#include "kv/compression/quantizers.h"

namespace tandem::kv {

void CompressOneBit(float threshold, std::span<const float> grad, std::span<float> residual,
                    std::span<std::byte> out) {
  const size_t n = grad.size();
  for (size_t byte = 0; byte < out.size(); ++byte) {
    const size_t start = byte * 8;
    uint8_t bits = 0;
    for (size_t j = 0; j < 8 && start + j < n; ++j) {
      const size_t i = start + j;
      float r = residual[i] + grad[i];
      if (r > threshold) {
        bits |= static_cast<uint8_t>(0x80u >> j);
        r -= 1.0f;
      } else {
        r += 1.0f;
      }
      residual[i] = r;
    }
    out[byte] = static_cast<std::byte>(bits);
  }
}

void DecompressOneBit(std::span<const std::byte> in, std::span<float> out) {
  for (size_t i = 0; i < out.size(); ++i) {
    const auto byte = static_cast<uint8_t>(in[i / 8]);
    out[i] = ((byte >> (7 - i % 8)) & 1u) != 0 ? 1.0f : -1.0f;
  }
}

}  // namespace tandem::kv
