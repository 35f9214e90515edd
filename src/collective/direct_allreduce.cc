// Direct allreduce: the latency-optimal path for tiny vectors.
//
// Idea: one round. Every rank sends its whole vector to every other rank
// and receives theirs (all receives posted first, into one scratch slot per
// rank), then combines the n vectors itself in rank order 0, 1, ..., n-1.
//
// Steps: 1 (n-1 messages out and n-1 in, all concurrently). Bytes on the
// wire per rank: (n-1) times the vector each way; worth it only while a
// message costs its latency rather than its bytes (a few KiB on loopback),
// where the ring's 2(n-1) and halving-doubling's 2 log2(n) sequential steps
// cost more. Every rank combines in the same fixed order, so every rank
// gets the same bits without a second round; tags Tag(kDirect, 0).
#include <cstring>

#include "collective/algorithms.h"

namespace tandem::collective {

void DirectAllReduce(OpContext& ctx, const ReduceSpec& spec, std::byte* data, size_t count,
                     std::span<std::byte> scratch, const Finalize& finalize) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const size_t bytes = count * spec.element_size;
  auto slot = [&](int i) { return scratch.subspan(static_cast<size_t>(i) * bytes, bytes); };
  if (n > 1) {
    if (bytes > 0) std::memcpy(slot(r).data(), data, bytes);
    for (int i = 0; i < n; ++i) {
      if (i != r) ctx.Post(i, Tag(phase::kDirect, 0), slot(i));
    }
    for (int k = 1; k < n; ++k) ctx.Send((r + k) % n, Tag(phase::kDirect, 0), slot(r));
    for (int k = 1; k < n; ++k) ctx.Wait((r + n - k) % n, Tag(phase::kDirect, 0));
    base::ReduceInto(spec.op, spec.dtype, data, slot(0).data(), slot(1).data(), count);
    for (int i = 2; i < n; ++i) base::Reduce(spec.op, spec.dtype, data, slot(i).data(), count);
  }
  if (finalize) finalize(data, count);
  ctx.Finish();
}

}  // namespace tandem::collective
