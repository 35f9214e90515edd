#include "base/doorbell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>

namespace tandem::base {

namespace {

// futex words must be plain 32-bit integers at their address.
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

uint32_t* Word(std::atomic<uint32_t>& a) { return reinterpret_cast<uint32_t*>(&a); }

}  // namespace

void Doorbell::Ring() {
  words_->counter.fetch_add(1, std::memory_order_seq_cst);
  if (words_->sleepers.load(std::memory_order_seq_cst) == 0) return;
  // Not FUTEX_PRIVATE_FLAG: the words may be in memory another process maps.
  ::syscall(SYS_futex, Word(words_->counter), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

bool Doorbell::Sleep(uint32_t seen, std::chrono::steady_clock::time_point deadline) {
  const auto now = std::chrono::steady_clock::now();
  if (now >= deadline) return Value() != seen;
  // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time, the clock of
  // std::chrono::steady_clock on Linux.
  const auto since_epoch = deadline.time_since_epoch();
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
  timespec at{};
  at.tv_sec = static_cast<time_t>(secs.count());
  at.tv_nsec = static_cast<long>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch - secs).count());
  words_->sleepers.fetch_add(1, std::memory_order_seq_cst);
  long rc = 0;
  if (words_->counter.load(std::memory_order_seq_cst) == seen) {
    rc = ::syscall(SYS_futex, Word(words_->counter), FUTEX_WAIT_BITSET, seen, &at, nullptr,
                   FUTEX_BITSET_MATCH_ANY);
  }
  const int err = errno;
  words_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  return !(rc == -1 && err == ETIMEDOUT);
}

}  // namespace tandem::base
