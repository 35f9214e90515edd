// An owned, uninitialised byte array: what the transport allocates for a
// received payload and what a server keeps as a key's value or merge buffer.
// Moving one never copies the bytes.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <span>

namespace tandem::kv {

/// Thread-safety: a plain value; its owner's thread touches it.
struct ByteBuffer {
  std::unique_ptr<std::byte[]> data;
  size_t size = 0;

  /// `n` bytes, not zeroed.
  static ByteBuffer Allocate(size_t n) {
    return {n ? std::make_unique_for_overwrite<std::byte[]>(n) : nullptr, n};
  }
  /// A copy of `bytes`.
  static ByteBuffer CopyOf(std::span<const std::byte> bytes) {
    ByteBuffer b = Allocate(bytes.size());
    if (!bytes.empty()) std::memcpy(b.data.get(), bytes.data(), bytes.size());
    return b;
  }
  std::span<std::byte> span() { return {data.get(), size}; }
  std::span<const std::byte> span() const { return {data.get(), size}; }
};

}  // namespace tandem::kv
