// The entry points of the collective algorithms, one file each:
// ring_reduce_scatter.cc, ring_allgather.cc, ring_allreduce.cc,
// halving_doubling_allreduce.cc, direct_allreduce.cc,
// recursive_doubling_allreduce.cc, hierarchical_allreduce.cc, tree_broadcast.cc,
// pairwise_alltoall.cc, dissemination_barrier.cc. Each file explains its
// algorithm, its steps and its bytes on the wire above the code;
// docs/collectives.md collects the figures.
//
// Every algorithm runs on the operation's thread with an OpContext, ends
// with OpContext::Finish(), and leaves the result only in the memory it was
// given. Tags: each message of an operation has a distinct tag, built by
// Tag() from the algorithm's phase, its step and the segment within it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/reduce.h"
#include "collective/algorithm_table.h"
#include "collective/op_context.h"

namespace tandem::collective {

/// Phases, the top byte of a tag; distinct across the algorithms that one
/// operation combines.
namespace phase {
inline constexpr uint8_t kReduceScatter = 1;
inline constexpr uint8_t kAllGather = 2;
inline constexpr uint8_t kFold = 3;
inline constexpr uint8_t kHalving = 4;
inline constexpr uint8_t kDoubling = 5;
inline constexpr uint8_t kUnfold = 6;
inline constexpr uint8_t kDirect = 7;
inline constexpr uint8_t kBroadcast = 8;
inline constexpr uint8_t kAllToAll = 9;
inline constexpr uint8_t kBarrier = 10;
inline constexpr uint8_t kRecursiveDoubling = 11;
}  // namespace phase

/// phase (8 bits) | step (24 bits) | segment (32 bits).
constexpr uint64_t Tag(uint8_t ph, uint64_t step, uint64_t segment = 0) {
  return (uint64_t{ph} << 56) | ((step & 0xFFFFFF) << 32) | (segment & 0xFFFFFFFF);
}

/// How elements combine.
struct ReduceSpec {
  base::ReduceOp op = base::ReduceOp::kSum;
  DType dtype = DType::kF32;
  size_t element_size = 4;
};

/// Applied by the one rank that first holds a fully reduced range, before it
/// is shared (the division of avg, post-scaling): every rank then has the
/// same bits. (data, element count).
using Finalize = std::function<void(std::byte*, size_t)>;

/// A partition of a vector into size() blocks, in elements.
struct Blocks {
  std::vector<size_t> offset;
  std::vector<size_t> count;
  /// `total` split into `n` blocks whose sizes differ by at most one (the
  /// first total % n blocks are the larger).
  static Blocks Even(size_t total, int n);
  /// Blocks of the given sizes, in order.
  static Blocks Of(const std::vector<size_t>& counts);
};

/// Ring reduce-scatter: on return block (rank + 1 + shift) mod n of `out`
/// holds the reduction over every rank's `in`; the other blocks of `out`
/// hold partial sums. `in` may be `out`. `scratch` holds at least the bytes
/// of `in`. Pieces are at most `segment_elements` long.
void RingReduceScatter(OpContext& ctx, const ReduceSpec& spec, const std::byte* in, std::byte* out,
                       const Blocks& blocks, int shift, std::span<std::byte> scratch,
                       size_t segment_elements);

/// Ring allgather, split in two so an allreduce can post its receives before
/// its reduce-scatter runs: block (rank + shift) mod n of `out` is this
/// rank's; on return every block holds its owner's.
void RingAllGatherPost(OpContext& ctx, std::byte* out, const Blocks& blocks, int shift,
                       size_t element_size, size_t segment_elements);
void RingAllGatherRun(OpContext& ctx, std::byte* out, const Blocks& blocks, int shift,
                      size_t element_size, size_t segment_elements);

/// Allreduces `count` elements from `in` into `out` (`in` may be `out`).
void RingAllReduce(OpContext& ctx, const ReduceSpec& spec, const std::byte* in, std::byte* out,
                   size_t count, std::span<std::byte> scratch, size_t segment_elements,
                   const Finalize& finalize);
/// RingAllReduce's steps without its closing OpContext::Finish(), for an
/// algorithm that runs it as one of its stages.
void RingAllReduceSteps(OpContext& ctx, const ReduceSpec& spec, const std::byte* in, std::byte* out,
                        size_t count, std::span<std::byte> scratch, size_t segment_elements,
                        const Finalize& finalize);

/// Allreduces `count` elements of `data` in place; scratch: half the bytes.
void HalvingDoublingAllReduce(OpContext& ctx, const ReduceSpec& spec, std::byte* data, size_t count,
                              std::span<std::byte> scratch, const Finalize& finalize);

/// Allreduces `count` elements of `data` in place; scratch: size() times the
/// bytes.
void DirectAllReduce(OpContext& ctx, const ReduceSpec& spec, std::byte* data, size_t count,
                     std::span<std::byte> scratch, const Finalize& finalize);

/// Allreduces `count` elements of `data` in place; scratch: the bytes.
void RecursiveDoublingAllReduce(OpContext& ctx, const ReduceSpec& spec, std::byte* data,
                                size_t count, std::span<std::byte> scratch,
                                const Finalize& finalize);

/// The members of a group by host: the group ranks on each host, hosts in
/// the order of their first member, ranks ascending.
struct HostLayout {
  std::vector<std::vector<int>> hosts;
  /// From each group rank's host (any name that is equal on one host).
  static HostLayout Of(const std::vector<std::string>& host_of_rank);
  /// The ranks on each host when every host holds as many, else 0.
  int PerHost() const;
  /// The host count and PerHost(), for the selection table.
  HostSpread Spread() const { return {static_cast<int>(hosts.size()), PerHost()}; }
};

/// Allreduces `count` elements from `in` into `out` (`in` may be `out`) in
/// three stages: a ring reduce-scatter among the ranks of each host, a ring
/// allreduce of each slice among the ranks that hold it on every host, a
/// ring allgather on each host. Needs layout.PerHost() > 0. Scratch: the
/// bytes.
void HierarchicalAllReduce(OpContext& ctx, const ReduceSpec& spec, const std::byte* in,
                           std::byte* out, size_t count, const HostLayout& layout,
                           std::span<std::byte> scratch, size_t segment_elements,
                           const Finalize& finalize);

/// Copies `data` of group rank `root` to every rank.
void TreeBroadcast(OpContext& ctx, std::span<std::byte> data, int root, size_t segment_bytes);

/// Block j of `in` to rank j, landing in block rank() of its `out`.
void PairwiseAllToAll(OpContext& ctx, const std::byte* in, std::byte* out, size_t block_bytes);

/// Returns once every rank entered.
void DisseminationBarrier(OpContext& ctx);

}  // namespace tandem::collective
