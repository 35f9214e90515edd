// Ring allreduce = ring reduce-scatter (ring_reduce_scatter.cc) followed by
// ring allgather (ring_allgather.cc), both pipelined in segments.
//
// Steps: 2(n-1). Bytes on the wire per rank: 2(n-1)/n of the vector sent
// and as much received, the minimum for any allreduce, which is why the
// ring wins for large vectors; its 2(n-1) sequential steps make it the
// slowest for small ones.
//
// After the reduce-scatter rank r holds block r+1 fully reduced; it applies
// `finalize` (avg's division, post-scaling) to that block only, then the
// allgather copies it to every rank, so every rank ends with the same bits.
// The allgather's receives are posted before the reduce-scatter starts, so
// a left neighbour that runs ahead writes straight into `out`.
#include <cstring>

#include "collective/algorithms.h"

namespace tandem::collective {

void RingAllReduce(OpContext& ctx, const ReduceSpec& spec, const std::byte* in, std::byte* out,
                   size_t count, std::span<std::byte> scratch, size_t segment_elements,
                   const Finalize& finalize) {
  RingAllReduceSteps(ctx, spec, in, out, count, scratch, segment_elements, finalize);
  ctx.Finish();
}

void RingAllReduceSteps(OpContext& ctx, const ReduceSpec& spec, const std::byte* in, std::byte* out,
                        size_t count, std::span<std::byte> scratch, size_t segment_elements,
                        const Finalize& finalize) {
  const int n = ctx.size();
  const size_t es = spec.element_size;
  if (n == 1) {
    if (in != out && count > 0) std::memcpy(out, in, count * es);
    if (finalize) finalize(out, count);
    return;
  }
  const Blocks blocks = Blocks::Even(count, n);
  RingAllGatherPost(ctx, out, blocks, 1, es, segment_elements);
  RingReduceScatter(ctx, spec, in, out, blocks, 0, scratch, segment_elements);
  const auto own = static_cast<size_t>((ctx.rank() + 1) % n);
  if (finalize) finalize(out + blocks.offset[own] * es, blocks.count[own]);
  RingAllGatherRun(ctx, out, blocks, 1, es, segment_elements);
}

}  // namespace tandem::collective
