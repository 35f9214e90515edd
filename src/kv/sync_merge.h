// One round of dist_sync on one key slice (docs/kvstore.md, "dist_sync"):
// exactly one push per worker is summed into a merge buffer; the round is
// complete when every worker pushed. The server's shard then applies the
// merged gradient (optimizer, or the merged sum becomes the value, as MXNet's
// KVStoreDistServer without an updater) and only then acknowledges the
// round's pushes, which SyncMerge keeps until then.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/byte_buffer.h"
#include "net/transport.h"
#include "net/wire_format.h"
#include "tandem/tensor.h"

namespace tandem::kv {

/// A push waiting for its round to complete before it is answered.
struct PendingAck {
  net::ConnectionId connection = 0;
  net::Header request;  ///< the push's header (type, sender, request id)
};

/// Thread-safety: owned by one server shard thread.
class SyncMerge {
 public:
  SyncMerge() = default;

  /// True when `worker` already pushed in the current round: its further
  /// requests on this key must wait for the round to complete.
  bool HasPushed(int worker) const;

  /// Adds `worker`'s dense gradient of `count` elements of `dtype` (taking
  /// the buffer: the first push of a round becomes the merge buffer without
  /// a copy) and remembers `ack`. Requires !HasPushed(worker), 0 <= worker <
  /// num_workers, grad.size == count * element size. Returns the buffer
  /// it no longer needs (empty when `grad` became the merge buffer).
  ByteBuffer Add(int worker, int num_workers, ByteBuffer grad, DType dtype, uint64_t count,
                 PendingAck ack);

  /// How many workers pushed in the current round.
  int pushed() const { return pushed_; }

  /// Ends the round: hands out the merged sum and the pushes to answer.
  /// Requires pushed() > 0.
  ByteBuffer TakeMerged(std::vector<PendingAck>* acks);

 private:
  std::vector<bool> pushed_by_;  // by worker rank
  int pushed_ = 0;
  ByteBuffer merged_;
  std::vector<PendingAck> acks_;
};

}  // namespace tandem::kv
