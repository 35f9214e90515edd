// MXNet's 2-bit gradient compression (src/kvstore/gradient_compression-inl.h
// in MXNet 1.9), bit for bit. docs/gradient-compression.md, "2bit":
//
// Value i lives in byte i / 4 of the output, in the two bits
// (7 - 2 * (i % 4), 6 - 2 * (i % 4)) of that byte (the first value in the
// two highest bits): 11 sends +threshold, 10 sends -threshold, 00 sends 0
// (01 is never written and reads as 0). Before quantising, the gradient is
// added into the residual; what is sent is subtracted from it.
#include <cstdint>

#include "kv/compression/quantizers.h"

namespace tandem::kv {

void CompressTwoBit(float threshold, std::span<const float> grad, std::span<float> residual,
                    std::span<std::byte> out) {
  const float pos = threshold;
  const float neg = -threshold;
  const size_t n = grad.size();
  for (size_t byte = 0; byte < out.size(); ++byte) {
    const size_t start = byte * 4;
    uint8_t bits = 0;
    for (size_t j = 0; j < 4 && start + j < n; ++j) {
      const size_t i = start + j;
      float r = residual[i] + grad[i];
      const unsigned shift = 6 - 2 * static_cast<unsigned>(j);
      if (r >= pos) {
        bits |= static_cast<uint8_t>(0x3u << shift);
        r -= pos;
      } else if (r <= neg) {
        bits |= static_cast<uint8_t>(0x2u << shift);
        r -= neg;
      }
      residual[i] = r;
    }
    out[byte] = static_cast<std::byte>(bits);
  }
}

void DecompressTwoBit(float threshold, std::span<const std::byte> in, std::span<float> out) {
  const float pos = threshold;
  const float neg = -threshold;
  for (size_t i = 0; i < out.size(); ++i) {
    const auto byte = static_cast<uint8_t>(in[i / 4]);
    const unsigned code = (byte >> (6 - 2 * (i % 4))) & 0x3u;
    out[i] = code == 0x3u ? pos : (code == 0x2u ? neg : 0.0f);
  }
}

}  // namespace tandem::kv
