// Recursive halving-doubling allreduce (Rabenseifner's algorithm), for any
// group size.
//
// Let p be the largest power of two <= n and m = n - p.
//
// 1. Fold (only when n is not a power of two): of the first 2m ranks, each
//    even rank sends its whole vector to the odd rank after it, which
//    combines it with its own (lower rank first) and goes on as one of the
//    p participants; the even rank waits for the result (step 4). The
//    participants are the odd ranks below 2m and every rank from 2m on, and
//    get new ranks v = 0..p-1 in that order.
// 2. Recursive halving (a reduce-scatter): the vector is cut into p blocks.
//    In step k (log2 p steps, distance d = p/2, p/4, ..., 1) participant v
//    exchanges with v xor d: it keeps the lower half of its current range
//    of blocks when v & d == 0 (the upper otherwise), sends the other half
//    and combines the partner's copy of its kept half into its own. After
//    the last step participant v holds block v fully reduced, and applies
//    `finalize` to it.
// 3. Recursive doubling (an allgather): distance d = 1, 2, ..., p/2:
//    participant v sends its range to v xor d and receives the partner's
//    adjacent range straight into place; the range doubles each step.
// 4. Unfold: each odd rank below 2m sends the result to the even rank
//    before it, which receives it straight into its vector.
//
// Steps: 2 log2(p), plus 2 when n is not a power of two. Bytes on the wire
// per participant: 2(p-1)/p of the vector (as the ring), plus the whole
// vector twice on the folded pairs. Fewer steps than the ring's 2(n-1), so
// it wins at medium sizes and larger groups. Tags Tag(phase, step).
#include <cstring>

#include "collective/algorithms.h"

namespace tandem::collective {

void HalvingDoublingAllReduce(OpContext& ctx, const ReduceSpec& spec, std::byte* data, size_t count,
                              std::span<std::byte> scratch, const Finalize& finalize) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const size_t es = spec.element_size;
  const size_t bytes = count * es;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int m = n - p;

  // 1. Fold.
  int v = -1;
  if (r < 2 * m) {
    if (r % 2 == 0) {
      ctx.Post(r + 1, Tag(phase::kUnfold, 0), {data, bytes});
      ctx.Send(r + 1, Tag(phase::kFold, 0), {data, bytes});
      ctx.Wait(r + 1, Tag(phase::kUnfold, 0));
      ctx.Finish();
      return;
    }
    ctx.Receive(r - 1, Tag(phase::kFold, 0), scratch.subspan(0, bytes));
    base::ReduceInto(spec.op, spec.dtype, data, scratch.data(), data, count);
    v = r / 2;
  } else {
    v = r - m;
  }
  auto real = [&](int u) { return u < m ? 2 * u + 1 : u + m; };

  // 2. Recursive halving over p blocks.
  const Blocks blocks = Blocks::Even(count, p);
  auto first = [&](int b) { return b < p ? blocks.offset[static_cast<size_t>(b)] : count; };
  int lo = 0;
  int hi = p;
  uint64_t step = 0;
  for (int d = p / 2; d >= 1; d /= 2, ++step) {
    const int partner = real(v ^ d);
    const int mid = lo + (hi - lo) / 2;
    int keep_lo = lo, keep_hi = mid, send_lo = mid, send_hi = hi;
    if (v & d) std::swap(keep_lo, send_lo), std::swap(keep_hi, send_hi);
    const size_t keep_first = first(keep_lo);
    const size_t keep_count = first(keep_hi) - keep_first;
    const size_t send_first = first(send_lo);
    const size_t send_count = first(send_hi) - send_first;
    ctx.Post(partner, Tag(phase::kHalving, step), scratch.subspan(0, keep_count * es));
    ctx.Send(partner, Tag(phase::kHalving, step), {data + send_first * es, send_count * es});
    ctx.Wait(partner, Tag(phase::kHalving, step));
    base::Reduce(spec.op, spec.dtype, data + keep_first * es, scratch.data(), keep_count);
    lo = keep_lo;
    hi = keep_hi;
  }
  if (finalize) finalize(data + first(v) * es, first(v + 1) - first(v));

  // 3. Recursive doubling.
  step = 0;
  for (int d = 1; d < p; d *= 2, ++step) {
    const int partner = real(v ^ d);
    const int other_lo = (v & d) ? lo - d : hi;
    const int other_hi = other_lo + d;
    const size_t other_first = first(other_lo);
    ctx.Post(partner, Tag(phase::kDoubling, step),
             {data + other_first * es, (first(other_hi) - other_first) * es});
    ctx.Send(partner, Tag(phase::kDoubling, step),
             {data + first(lo) * es, (first(hi) - first(lo)) * es});
    ctx.Wait(partner, Tag(phase::kDoubling, step));
    lo = std::min(lo, other_lo);
    hi = std::max(hi, other_hi);
  }

  // 4. Unfold.
  if (r < 2 * m) ctx.Send(r - 1, Tag(phase::kUnfold, 0), {data, bytes});
  ctx.Finish();
}

}  // namespace tandem::collective
