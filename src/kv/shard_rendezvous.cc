// Stop-the-shards (shard_rendezvous.h).
#include "kv/shard_rendezvous.h"

namespace tandem::kv {

ShardRendezvous::ShardRendezvous(size_t parties, std::function<void()> work)
    : parties_(parties), work_(std::move(work)) {}

void ShardRendezvous::Arrive() {
  std::unique_lock lock(mu_);
  if (done_) return;
  if (++arrived_ < parties_) {
    cv_.wait(lock, [&] { return done_; });
    return;
  }
  // The last party: every other shard is parked on cv_ (or the rendezvous
  // was cancelled, and they may already be gone).
  lock.unlock();
  work_();
  lock.lock();
  done_ = true;
  cv_.notify_all();
}

void ShardRendezvous::Cancel() {
  {
    std::lock_guard lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

}  // namespace tandem::kv
