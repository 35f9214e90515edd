// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of the
// frame header (docs/wire-format.md, "Header checksum").
//
// Two implementations compute the same function: a portable table-driven one
// (slicing-by-8) and, on x86-64 CPUs that have SSE4.2, the crc32 instruction.
// Crc32c() picks at run time; the portable one is callable on its own so tests
// can check that both agree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace tandem::net {

/// CRC-32C of `bytes` (initial value and final xor 0xFFFFFFFF, as in RFC 3720
/// and iSCSI; "123456789" gives 0xE3069283). Uses the CPU instruction when
/// available. Any thread; never throws.
uint32_t Crc32c(std::span<const std::byte> bytes);

/// The same function computed with lookup tables only. Any thread; never
/// throws.
uint32_t Crc32cPortable(std::span<const std::byte> bytes);

/// True when this CPU lets Crc32c() use the SSE4.2 crc32 instruction. Any
/// thread; never throws.
bool Crc32cHasHardwareSupport();

}  // namespace tandem::net
