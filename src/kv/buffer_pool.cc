// Recycled payload buffers (buffer_pool.h).
#include "kv/buffer_pool.h"

namespace tandem::kv {

ByteBuffer BufferPool::Take(size_t size) {
  {
    std::lock_guard lock(mu_);
    auto it = idle_.find(size);
    if (it != idle_.end()) {
      ByteBuffer b = std::move(it->second);
      idle_.erase(it);
      idle_bytes_ -= size;
      return b;
    }
  }
  return ByteBuffer::Allocate(size);
}

void BufferPool::Give(ByteBuffer b) {
  if (!b.data || b.size == 0) return;
  std::lock_guard lock(mu_);
  if (idle_bytes_ + b.size > max_bytes_) return;  // b is freed on return
  idle_bytes_ += b.size;
  const size_t size = b.size;
  idle_.emplace(size, std::move(b));
}

size_t BufferPool::idle_bytes() const {
  std::lock_guard lock(mu_);
  return idle_bytes_;
}

}  // namespace tandem::kv
