// Parameters, sizes and dispatch of gradient compression
// (gradient_compression.h; formats in docs/gradient-compression.md).
#include "kv/compression/gradient_compression.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstring>

#include "kv/compression/quantizers.h"
#include "tandem/error.h"

namespace tandem::kv {
namespace {

// Values per 32-bit word, MXNet's GetCompressionFactor.
size_t ValuesPerWord(CompressionType type) { return type == CompressionType::kOneBit ? 32 : 16; }

std::string_view TypeName(CompressionType type) {
  switch (type) {
    case CompressionType::kNone:
      return "none";
    case CompressionType::kOneBit:
      return "1bit";
    case CompressionType::kTwoBit:
      return "2bit";
  }
  return "?";
}

}  // namespace

CompressionParams ParseCompressionParams(const std::map<std::string, std::string>& params) {
  CompressionParams out;
  auto type = params.find("type");
  if (type == params.end()) {
    throw InvalidArgument("gradient compression: entry 'type' is required (2bit, 1bit or none)");
  }
  if (type->second == "2bit") {
    out.type = CompressionType::kTwoBit;
  } else if (type->second == "1bit") {
    out.type = CompressionType::kOneBit;
  } else if (type->second == "none") {
    out.type = CompressionType::kNone;
  } else {
    throw InvalidArgument(fmt::format(
        "gradient compression: entry 'type' is '{}', expected 2bit, 1bit or none", type->second));
  }
  for (const auto& [name, value] : params) {
    if (name == "type") continue;
    if (name != "threshold") {
      throw InvalidArgument(fmt::format(
          "gradient compression: unknown entry '{}' (value '{}'); accepted: type, threshold", name,
          value));
    }
    const char* begin = value.data();
    const char* end = value.data() + value.size();
    if (begin != end && *begin == '+') ++begin;
    float threshold = 0;
    auto [ptr, ec] = std::from_chars(begin, end, threshold);
    if (begin == end || ec != std::errc() || ptr != end || !std::isfinite(threshold)) {
      throw InvalidArgument(fmt::format(
          "gradient compression: entry 'threshold' is '{}', expected a finite number", value));
    }
    out.threshold = threshold;
  }
  if (out.type == CompressionType::kTwoBit && !(out.threshold > 0)) {
    throw InvalidArgument(fmt::format(
        "gradient compression: entry 'threshold' is {}, must be greater than 0 for 2bit",
        out.threshold));
  }
  return out;
}

size_t CompressedBytes(const CompressionParams& params, size_t count) {
  if (params.type == CompressionType::kNone) return count * sizeof(float);
  const size_t per_word = ValuesPerWord(params.type);
  return (count + per_word - 1) / per_word * 4;
}

void Compress(const CompressionParams& params, std::span<const float> grad,
              std::span<float> residual, std::span<std::byte> out) {
  if (params.type != CompressionType::kNone && residual.size() != grad.size()) {
    throw InvalidArgument(
        fmt::format("gradient compression ({}): gradient has {} values but the residual {}",
                    TypeName(params.type), grad.size(), residual.size()));
  }
  const size_t expected = CompressedBytes(params, grad.size());
  if (out.size() != expected) {
    throw InvalidArgument(
        fmt::format("gradient compression ({}): {} values compress to {} bytes, output has {}",
                    TypeName(params.type), grad.size(), expected, out.size()));
  }
  switch (params.type) {
    case CompressionType::kNone:
      if (!grad.empty()) std::memcpy(out.data(), grad.data(), out.size());
      return;
    case CompressionType::kTwoBit:
      CompressTwoBit(params.threshold, grad, residual, out);
      return;
    case CompressionType::kOneBit:
      CompressOneBit(params.threshold, grad, residual, out);
      return;
  }
}

void Decompress(const CompressionParams& params, std::span<const std::byte> in,
                std::span<float> out) {
  const size_t expected = CompressedBytes(params, out.size());
  if (in.size() != expected) {
    throw InvalidArgument(
        fmt::format("gradient compression ({}): {} values need {} compressed bytes, got {}",
                    TypeName(params.type), out.size(), expected, in.size()));
  }
  switch (params.type) {
    case CompressionType::kNone:
      if (!out.empty()) std::memcpy(out.data(), in.data(), in.size());
      return;
    case CompressionType::kTwoBit:
      DecompressTwoBit(params.threshold, in, out);
      return;
    case CompressionType::kOneBit:
      DecompressOneBit(in, out);
      return;
  }
}

}  // namespace tandem::kv
