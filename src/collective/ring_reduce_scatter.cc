// Ring reduce-scatter.
//
// Idea: the n ranks form a ring (rank r sends to r+1 and receives from r-1,
// modulo n); the vector is cut into n blocks. In step s (0..n-2) rank r
// sends block (r - s + shift) to its right and receives block
// (r - s - 1 + shift) from its left, which it combines with its own copy of
// that block; the combined block is what it sends in step s+1. After n-1
// steps block (r + 1 + shift) has passed through every rank once and holds
// the reduction of all n inputs on rank r.
//
// Pipelining: every block is cut into segments of at most
// `segment_elements`, and each segment travels on its own. Every receive
// of the operation is posted up front (into `scratch`, one region per step)
// so the transport reads each segment straight there; the operation's
// thread waits for segment (s, j), combines it, and at once sends it on as
// segment (s+1, j); it takes the segments in the order they arrive, within
// a short window (ArrivalWindow), so that one stalled connection of several
// per pair holds back only its own segments. While it combines one segment,
// the transport's thread writes the segments queued before it and reads the
// ones that follow: sending, receiving and reducing overlap.
//
// Bytes on the wire: each rank sends and receives (n-1)/n of the vector;
// n-1 steps, each of one block; tags Tag(kReduceScatter, s, j).
//
// Order of combination: block c is combined along the ring starting at rank
// c - shift, as out = own op received; the result is bit-identical wherever
// it is later copied (the allgather copies, never recombines).
#include <algorithm>

#include "collective/algorithms.h"
#include "collective/arrival_window.h"

namespace tandem::collective {

namespace {
int Mod(int a, int n) { return ((a % n) + n) % n; }
size_t Segments(size_t count, size_t seg) { return (count + seg - 1) / seg; }
}  // namespace

void RingReduceScatter(OpContext& ctx, const ReduceSpec& spec, const std::byte* in, std::byte* out,
                       const Blocks& blocks, int shift, std::span<std::byte> scratch,
                       size_t segment_elements) {
  const int n = ctx.size();
  const int r = ctx.rank();
  if (n == 1) return;
  const int right = Mod(r + 1, n);
  const int left = Mod(r - 1, n);
  const size_t es = spec.element_size;
  const size_t seg = std::max<size_t>(segment_elements, 1);
  auto send_block = [&](int s) { return static_cast<size_t>(Mod(r - s + shift, n)); };
  auto recv_block = [&](int s) { return static_cast<size_t>(Mod(r - s - 1 + shift, n)); };

  // Post every receive: step s lands at scratch_at[s].
  std::vector<size_t> scratch_at(static_cast<size_t>(n - 1));
  size_t at = 0;
  for (int s = 0; s < n - 1; ++s) {
    const size_t c = recv_block(s);
    scratch_at[static_cast<size_t>(s)] = at;
    for (size_t j = 0, segs = Segments(blocks.count[c], seg); j < segs; ++j) {
      const size_t len = std::min(seg, blocks.count[c] - j * seg);
      ctx.Post(left, Tag(phase::kReduceScatter, static_cast<uint64_t>(s), j),
               scratch.subspan((at + j * seg) * es, len * es));
    }
    at += blocks.count[c];
  }
  // Step 0 sends this rank's own input.
  {
    const size_t c = send_block(0);
    for (size_t j = 0, segs = Segments(blocks.count[c], seg); j < segs; ++j) {
      const size_t len = std::min(seg, blocks.count[c] - j * seg);
      ctx.Send(right, Tag(phase::kReduceScatter, 0, j),
               {in + (blocks.offset[c] + j * seg) * es, len * es});
    }
  }
  // Handle the segments as they arrive (ArrivalWindow): segment (s, j)
  // touches only block recv_block(s), so the order among segments is free;
  // each segment's combination stays `own op received`.
  std::vector<std::pair<int, uint64_t>> expected;
  std::vector<std::pair<int, size_t>> step_segment;
  for (int s = 0; s < n - 1; ++s) {
    for (size_t j = 0, segs = Segments(blocks.count[recv_block(s)], seg); j < segs; ++j) {
      expected.emplace_back(left, Tag(phase::kReduceScatter, static_cast<uint64_t>(s), j));
      step_segment.emplace_back(s, j);
    }
  }
  ArrivalWindow arrivals(std::move(expected));
  while (!arrivals.done()) {
    const auto [s, j] = step_segment[arrivals.Next(ctx)];
    const size_t c = recv_block(s);
    const size_t len = std::min(seg, blocks.count[c] - j * seg);
    const size_t element = blocks.offset[c] + j * seg;
    std::byte* dst = out + element * es;
    base::ReduceInto(spec.op, spec.dtype, dst, in + element * es,
                     scratch.data() + (scratch_at[static_cast<size_t>(s)] + j * seg) * es, len);
    if (s < n - 2) {
      ctx.Send(right, Tag(phase::kReduceScatter, static_cast<uint64_t>(s + 1), j), {dst, len * es});
    }
  }
}

}  // namespace tandem::collective
