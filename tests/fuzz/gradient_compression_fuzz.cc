// libFuzzer target: arbitrary bytes as a compressed push's payload through
// the server's dequantisers (docs/gradient-compression.md). Input: byte 0
// picks 1bit or 2bit, bytes 1..4 the threshold (float32), bytes 5..6 the
// element count, the rest the compressed bytes. An InvalidArgument (a
// payload of the wrong length) is a correct answer; a crash, a sanitizer
// report, or a value outside what the format can express is a bug.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "kv/compression/gradient_compression.h"
#include "tandem/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::kv;
  if (size < 7) return 0;
  CompressionParams params;
  params.type = data[0] % 2 == 0 ? CompressionType::kOneBit : CompressionType::kTwoBit;
  std::memcpy(&params.threshold, data + 1, sizeof(float));
  const size_t count = static_cast<size_t>(data[5]) | (static_cast<size_t>(data[6]) << 8);
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data + 7), size - 7);
  std::vector<float> out(count);
  try {
    Decompress(params, in, out);
  } catch (const tandem::InvalidArgument&) {
    if (in.size() == CompressedBytes(params, count)) std::abort();  // a right length refused
    return 0;
  }
  if (in.size() != CompressedBytes(params, count)) std::abort();  // a wrong length taken
  for (float v : out) {
    if (params.type == CompressionType::kOneBit) {
      if (v != 1.0f && v != -1.0f) std::abort();
    } else if (!(v == 0.0f || std::memcmp(&v, &params.threshold, sizeof v) == 0 ||
                 (v == -params.threshold))) {
      if (!(std::isnan(v) && std::isnan(params.threshold))) std::abort();
    }
  }
  return 0;
}
