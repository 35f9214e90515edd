// Ring allgather.
//
// Idea: rank r starts with block (r + shift) of the vector. In step s
// (0..n-2) it sends block (r + shift - s) to its right and receives block
// (r + shift - s - 1) from its left, straight into its place in `out`; the
// block received in step s is the one sent in step s+1. After n-1 steps
// every rank has every block.
//
// Pipelining: blocks travel in segments of at most `segment_elements`; all
// receives are posted before the first send (RingAllGatherPost), so each
// segment lands in place without a copy, and is forwarded as soon as it
// arrived while later segments are still on the wire (in the order they
// arrive, within a short window: ArrivalWindow).
//
// Bytes on the wire: each rank sends and receives every block but its own,
// (n-1)/n of the vector for equal blocks; n-1 steps; tags
// Tag(kAllGather, s, j).
//
// Safety of posting early (an allreduce posts before its reduce-scatter
// ran): a block reaches this rank in the allgather only after it went once
// around the ring in the reduce-scatter, which includes this rank's last
// send from and write to that block, so the transport never writes a block
// this rank still reads or combines.
#include <algorithm>

#include "collective/algorithms.h"
#include "collective/arrival_window.h"

namespace tandem::collective {

namespace {
int Mod(int a, int n) { return ((a % n) + n) % n; }
// An empty block still travels, as one empty piece: every rank's result
// then depends on every rank's, so the call checks reach them all
// (docs/collectives.md "Call checks"), and AllGatherV with empty blocks
// synchronises like any other.
size_t Segments(size_t count, size_t seg) { return std::max<size_t>((count + seg - 1) / seg, 1); }

template <typename Fn>
void ForEachSegment(size_t count, size_t seg, Fn&& fn) {
  for (size_t j = 0, segs = Segments(count, seg); j < segs; ++j) {
    fn(j, j * seg, std::min(seg, count - j * seg));
  }
}
}  // namespace

void RingAllGatherPost(OpContext& ctx, std::byte* out, const Blocks& blocks, int shift,
                       size_t element_size, size_t segment_elements) {
  const int n = ctx.size();
  const int r = ctx.rank();
  if (n == 1) return;
  const int left = Mod(r - 1, n);
  const size_t seg = std::max<size_t>(segment_elements, 1);
  for (int s = 0; s < n - 1; ++s) {
    const auto c = static_cast<size_t>(Mod(r + shift - s - 1, n));
    ForEachSegment(blocks.count[c], seg, [&](size_t j, size_t first, size_t len) {
      ctx.Post(left, Tag(phase::kAllGather, static_cast<uint64_t>(s), j),
               {out + (blocks.offset[c] + first) * element_size, len * element_size});
    });
  }
}

void RingAllGatherRun(OpContext& ctx, std::byte* out, const Blocks& blocks, int shift,
                      size_t element_size, size_t segment_elements) {
  const int n = ctx.size();
  const int r = ctx.rank();
  if (n == 1) return;
  const int right = Mod(r + 1, n);
  const int left = Mod(r - 1, n);
  const size_t seg = std::max<size_t>(segment_elements, 1);
  const auto own = static_cast<size_t>(Mod(r + shift, n));
  ForEachSegment(blocks.count[own], seg, [&](size_t j, size_t first, size_t len) {
    ctx.Send(right, Tag(phase::kAllGather, 0, j),
             {out + (blocks.offset[own] + first) * element_size, len * element_size});
  });
  // Forward the segments as they arrive (ArrivalWindow): each lands in its
  // own place, so the order among them is free.
  std::vector<std::pair<int, uint64_t>> expected;
  std::vector<std::pair<int, size_t>> step_segment;
  for (int s = 0; s < n - 1; ++s) {
    const auto c = static_cast<size_t>(Mod(r + shift - s - 1, n));
    ForEachSegment(blocks.count[c], seg, [&](size_t j, size_t, size_t) {
      expected.emplace_back(left, Tag(phase::kAllGather, static_cast<uint64_t>(s), j));
      step_segment.emplace_back(s, j);
    });
  }
  ArrivalWindow arrivals(std::move(expected));
  while (!arrivals.done()) {
    const auto [s, j] = step_segment[arrivals.Next(ctx)];
    if (s == n - 2) continue;
    const auto c = static_cast<size_t>(Mod(r + shift - s - 1, n));
    const size_t first = j * seg;
    const size_t len = std::min(seg, blocks.count[c] - first);
    ctx.Send(right, Tag(phase::kAllGather, static_cast<uint64_t>(s + 1), j),
             {out + (blocks.offset[c] + first) * element_size, len * element_size});
  }
}

}  // namespace tandem::collective
