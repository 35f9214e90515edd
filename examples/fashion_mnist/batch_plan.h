// Which examples each worker trains on at each step (docs/training.md,
// "Sharding").
//
// Every epoch has one permutation of the training set, the same on every
// worker (seeded by the job's seed and the epoch). Step s of the epoch takes
// the global batch at positions [s*G, (s+1)*G) of that permutation, G being
// the sum of the workers' batches; worker r (part_index r of num_parts W)
// takes its own contiguous part of it, of size batch(r). So the workers'
// parts of an epoch are disjoint shards covering it, and the union of their
// batches at a step is exactly the batch one worker with batch G would take
// at that step, which is what makes W workers on batch B equivalent to one
// worker on batch W*B. Examples beyond the last whole global batch are
// dropped for that epoch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fashion_mnist {

/// The per-step shards of one job.
///
/// Thread-safety: immutable after construction; any thread.
class BatchPlan {
 public:
  /// `num_examples` training examples; `num_parts` workers, this one being
  /// `part_index`; every worker's batch is `batch_size`, or, with a non-empty
  /// `workload` (one positive weight per worker), the global batch
  /// `batch_size * num_parts` split in proportion to the weights (largest
  /// remainder first, ties to the lower rank; every part at least 1).
  /// Throws tandem::InvalidArgument naming the bad value (part index out of
  /// range, workload of the wrong length or with a weight <= 0, a global
  /// batch larger than the data set).
  BatchPlan(int64_t num_examples, int num_parts, int part_index, int64_t batch_size,
            const std::vector<double>& workload, uint64_t seed);

  /// This worker's batch size, and every worker's.
  int64_t local_batch() const { return batches_[static_cast<size_t>(part_index_)]; }
  const std::vector<int64_t>& batches() const { return batches_; }
  /// The sum of the workers' batches.
  int64_t global_batch() const { return global_batch_; }
  /// Whole global batches per epoch.
  int64_t steps_per_epoch() const { return num_examples_ / global_batch_; }

  /// The permutation of epoch `epoch` (0-based): every example index once.
  std::vector<int64_t> EpochOrder(int epoch) const;
  /// This worker's example indices at `step` of the epoch whose order is
  /// `order` (from EpochOrder). Requires step < steps_per_epoch().
  std::vector<int64_t> LocalBatch(const std::vector<int64_t>& order, int64_t step) const;

 private:
  int64_t num_examples_;
  int part_index_;
  std::vector<int64_t> batches_;
  int64_t global_batch_ = 0;
  int64_t offset_ = 0;  // where this worker's part starts within a global batch
  uint64_t seed_;
};

}  // namespace fashion_mnist
