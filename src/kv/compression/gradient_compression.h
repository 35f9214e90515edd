// MXNet's gradient compression, bit for bit: "2bit" (threshold, 16 values
// per 32-bit word) and "1bit" (32 values per word), both with an
// error-feedback residual per key. docs/gradient-compression.md gives the
// formats.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>

namespace tandem::kv {

enum class CompressionType : uint8_t { kNone = 0, kOneBit = 1, kTwoBit = 2 };

/// What SetGradientCompression configures.
struct CompressionParams {
  CompressionType type = CompressionType::kNone;
  float threshold = 0.5f;  ///< MXNet's default
};

/// Parses MXNet's dictionary form: {"type": "2bit"|"1bit"|"none",
/// "threshold": "0.5"}. Throws InvalidArgument naming the bad entry.
CompressionParams ParseCompressionParams(const std::map<std::string, std::string>& params);

/// Bytes of the compressed form of `count` float32 values (whole 32-bit
/// words, as MXNet sizes them); `count` * 4 for kNone.
size_t CompressedBytes(const CompressionParams& params, size_t count);

/// Quantises `grad` plus `residual` into `out` (CompressedBytes bytes) and
/// leaves in `residual` what the quantisation did not send (error
/// feedback). grad and residual have the same length. Throws
/// InvalidArgument on mismatched lengths.
void Compress(const CompressionParams& params, std::span<const float> grad,
              std::span<float> residual, std::span<std::byte> out);

/// Expands `in` into `out.size()` dequantised float32 values, exactly as
/// MXNet's server does before it sums. Throws InvalidArgument when `in` is
/// not CompressedBytes(out.size()) long.
void Decompress(const CompressionParams& params, std::span<const std::byte> in,
                std::span<float> out);

}  // namespace tandem::kv
