// Stop-the-shards for server-wide work that reads or replaces every shard's
// keys (a checkpoint's save, stage and commit: docs/checkpoints.md,
// "Protocol"). The server posts one rendezvous to every shard's queue; each
// shard thread that reaches it waits there, and the last to arrive runs the
// work while the others wait, then releases them all. So the work sees
// every shard between two requests, with no request half-handled, and no
// shard touches its keys meanwhile.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>

namespace tandem::kv {

/// Thread-safety: Arrive is called once by each of `parties` shard threads;
/// Cancel from any thread. The mutex orders the work's reads and writes of
/// the shards' state after everything the shards did before arriving, and
/// before everything they do after leaving.
class ShardRendezvous {
 public:
  /// `work` must not throw (it reports its own errors).
  ShardRendezvous(size_t parties, std::function<void()> work);

  /// Blocks the calling shard thread until the work ran (or the rendezvous
  /// was cancelled); the last of the parties to arrive runs it.
  void Arrive();

  /// Releases every waiting party without running the work (the server is
  /// going away). Idempotent.
  void Cancel();

 private:
  const size_t parties_;
  std::function<void()> work_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t arrived_ = 0;  // guarded by mu_
  bool done_ = false;   // guarded by mu_
};

}  // namespace tandem::kv
