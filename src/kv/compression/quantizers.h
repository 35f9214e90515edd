// The two quantisers behind gradient_compression.h, one file each
// (two_bit_compression.cc, one_bit_compression.cc). Callers have checked
// every length: `out`/`in` hold exactly the compressed bytes for the
// element count. docs/gradient-compression.md gives the formats.
#pragma once

#include <cstddef>
#include <span>

namespace tandem::kv {

/// MXNet's quantize_2bit over whole 32-bit words (16 values each).
void CompressTwoBit(float threshold, std::span<const float> grad, std::span<float> residual,
                    std::span<std::byte> out);

/// MXNet's dequantize_2bit: +threshold, -threshold or 0 per value.
void DecompressTwoBit(float threshold, std::span<const std::byte> in, std::span<float> out);

/// MXNet's quantize_1bit over whole 32-bit words (32 values each).
void CompressOneBit(float threshold, std::span<const float> grad, std::span<float> residual,
                    std::span<std::byte> out);

/// MXNet's dequantize_1bit: +1 or -1 per value.
void DecompressOneBit(std::span<const std::byte> in, std::span<float> out);

}  // namespace tandem::kv
