// A doorbell: a 32-bit counter that wakers bump and sleepers wait on with
// futex(2), in private memory or in memory that several processes share
// (the collectives' same-host mailbox, docs/collectives.md "Mailbox").
//
// The protocol that loses no wake-up: a sleeper reads Value() before it
// looks at whatever it waits for, then calls Sleep(seen, deadline), which
// returns at once when the counter moved since. A waker first publishes its
// change, then calls Ring(). The futex system call is made only when some
// thread sleeps (the count of sleepers lives beside the counter), so a Ring
// with nobody asleep costs two atomic operations.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace tandem::base {

/// The two words a doorbell needs; placed in shared memory by the owner of
/// a region (zeroed), or held by a Doorbell that owns its own.
struct DoorbellWords {
  std::atomic<uint32_t> counter{0};
  std::atomic<uint32_t> sleepers{0};
};
static_assert(std::atomic<uint32_t>::is_always_lock_free,
              "a doorbell in shared memory needs lock-free 32-bit atomics");
static_assert(sizeof(DoorbellWords) == 8, "DoorbellWords is laid out in shared memory");

/// Thread-safety: every method may be called from any thread (and, for
/// words in shared memory, from any process that maps them).
class Doorbell {
 public:
  /// A doorbell with words of its own (private to this process).
  Doorbell() : words_(&own_) {}
  /// A doorbell over `words`, borrowed (e.g. in a shared mapping) for the
  /// doorbell's lifetime.
  explicit Doorbell(DoorbellWords* words) : words_(words) {}
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  /// The counter now; read it before checking what the caller waits for.
  uint32_t Value() const { return words_->counter.load(std::memory_order_seq_cst); }

  /// Bumps the counter and wakes every sleeper. Call after publishing the
  /// change that sleepers wait for.
  void Ring();

  /// Sleeps until the counter differs from `seen` (at once if it already
  /// does), `deadline` passes, or a spurious wake-up; returns false only
  /// when the deadline passed. The caller re-checks its condition either way.
  bool Sleep(uint32_t seen, std::chrono::steady_clock::time_point deadline);

 private:
  DoorbellWords own_;
  DoorbellWords* words_;
};

}  // namespace tandem::base
