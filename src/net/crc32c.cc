#include "net/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace tandem::net {
namespace {

// Bit-reversed Castagnoli polynomial.
constexpr uint32_t kPolynomial = 0x82F63B78u;

// kTables[0] is the classic byte-at-a-time table. kTables[k][b] is the CRC
// contribution of byte b followed by k zero bytes, which lets the portable
// loop fold eight input bytes per step with eight independent lookups.
using CrcTables = std::array<std::array<uint32_t, 256>, 8>;

constexpr CrcTables MakeTables() {
  CrcTables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kPolynomial : 0u);
    t[0][b] = crc;
  }
  for (size_t k = 1; k < t.size(); ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  }
  return t;
}

constexpr CrcTables kTables = MakeTables();

uint32_t LoadLittle32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;  // the build asserts a little-endian host (base/byte_io.h)
}

// Updates the running (already inverted) register `crc` with `bytes`.
uint32_t UpdatePortable(uint32_t crc, std::span<const std::byte> bytes) {
  const std::byte* p = bytes.data();
  size_t n = bytes.size();
  while (n >= 8) {
    uint32_t lo = LoadLittle32(p) ^ crc;
    uint32_t hi = LoadLittle32(p + 4);
    crc = kTables[7][lo & 0xFFu] ^ kTables[6][(lo >> 8) & 0xFFu] ^ kTables[5][(lo >> 16) & 0xFFu] ^
          kTables[4][lo >> 24] ^ kTables[3][hi & 0xFFu] ^ kTables[2][(hi >> 8) & 0xFFu] ^
          kTables[1][(hi >> 16) & 0xFFu] ^ kTables[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    crc = (crc >> 8) ^ kTables[0][(crc ^ static_cast<uint32_t>(*p)) & 0xFFu];
    ++p;
    --n;
  }
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t UpdateHardware(uint32_t crc,
                                                          std::span<const std::byte> bytes) {
  const std::byte* p = bytes.data();
  size_t n = bytes.size();
  uint64_t crc64 = crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, sizeof(v));
    crc64 = _mm_crc32_u64(crc64, v);
    p += 8;
    n -= 8;
  }
  crc = static_cast<uint32_t>(crc64);
  while (n > 0) {
    crc = _mm_crc32_u8(crc, static_cast<uint8_t>(*p));
    ++p;
    --n;
  }
  return crc;
}
#endif

}  // namespace

bool Crc32cHasHardwareSupport() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("sse4.2");
#else
  return false;
#endif
}

uint32_t Crc32cPortable(std::span<const std::byte> bytes) { return ~UpdatePortable(~0u, bytes); }

uint32_t Crc32c(std::span<const std::byte> bytes) {
#if defined(__x86_64__)
  if (Crc32cHasHardwareSupport()) return ~UpdateHardware(~0u, bytes);
#endif
  return ~UpdatePortable(~0u, bytes);
}

}  // namespace tandem::net
