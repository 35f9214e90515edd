// Recycled payload buffers for a server. Receiving a large push into fresh
// memory costs a page fault per 4 KiB page, and on virtual machines a
// fault costs microseconds: a 64 MiB push spent most of its time faulting
// (measured: docs/benchmarks.md, "Parameter server"). The server posts
// buffers from this pool as payload destinations and gives merge buffers,
// replaced values and consumed gradients back, so steady-state rounds touch
// memory that is already mapped.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include "kv/byte_buffer.h"

namespace tandem::kv {

/// Thread-safety: any thread; internally locked.
class BufferPool {
 public:
  /// Keeps at most `max_bytes` of idle buffers.
  explicit BufferPool(size_t max_bytes) : max_bytes_(max_bytes) {}

  /// A buffer of exactly `size` bytes: a recycled one when there is one,
  /// else a new (not zeroed) one.
  ByteBuffer Take(size_t size);

  /// Gives `b` back for reuse; frees it when the pool is full.
  void Give(ByteBuffer b);

  /// Idle bytes held.
  size_t idle_bytes() const;

 private:
  const size_t max_bytes_;
  mutable std::mutex mu_;
  std::multimap<size_t, ByteBuffer> idle_;  // by size; guarded by mu_
  size_t idle_bytes_ = 0;                   // guarded by mu_
};

}  // namespace tandem::kv
