// dist_sync merge rounds (docs/kvstore.md, "dist_sync").
#include "kv/sync_merge.h"

#include "base/reduce.h"

namespace tandem::kv {

bool SyncMerge::HasPushed(int worker) const {
  return worker >= 0 && static_cast<size_t>(worker) < pushed_by_.size() &&
         pushed_by_[static_cast<size_t>(worker)];
}

ByteBuffer SyncMerge::Add(int worker, int num_workers, ByteBuffer grad, DType dtype, uint64_t count,
                          PendingAck ack) {
  if (pushed_by_.size() != static_cast<size_t>(num_workers)) {
    pushed_by_.assign(static_cast<size_t>(num_workers), false);
  }
  if (pushed_ == 0) {
    merged_ = std::move(grad);
    grad = ByteBuffer{};
  } else {
    base::Reduce(base::ReduceOp::kSum, dtype, merged_.data.get(), grad.data.get(),
                 static_cast<size_t>(count));
  }
  pushed_by_[static_cast<size_t>(worker)] = true;
  ++pushed_;
  acks_.push_back(ack);
  return grad;
}

ByteBuffer SyncMerge::TakeMerged(std::vector<PendingAck>* acks) {
  *acks = std::move(acks_);
  acks_.clear();
  pushed_by_.assign(pushed_by_.size(), false);
  pushed_ = 0;
  return std::move(merged_);
}

}  // namespace tandem::kv
