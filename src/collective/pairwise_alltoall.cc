// All-to-all by direct pairwise exchange.
//
// Idea: every rank posts a receive from every other rank straight into that
// rank's block of `out`, then sends block j of `in` to rank j for
// j = r+1, r+2, ... (mod n), so that at any moment the ranks send to
// different peers, and copies its own block locally.
//
// Steps: 1 (n-1 messages each way, concurrently). Bytes on the wire per
// rank: (n-1)/n of `in` sent and as much received, the minimum. Tags
// Tag(kAllToAll, 0).
#include <cstring>

#include "collective/algorithms.h"

namespace tandem::collective {

void PairwiseAllToAll(OpContext& ctx, const std::byte* in, std::byte* out, size_t block_bytes) {
  const int n = ctx.size();
  const int r = ctx.rank();
  auto at = [&](int j) { return static_cast<size_t>(j) * block_bytes; };
  for (int k = 1; k < n; ++k) {
    const int from = (r + n - k) % n;
    ctx.Post(from, Tag(phase::kAllToAll, 0), {out + at(from), block_bytes});
  }
  for (int k = 1; k < n; ++k) {
    const int to = (r + k) % n;
    ctx.Send(to, Tag(phase::kAllToAll, 0), {in + at(to), block_bytes});
  }
  if (block_bytes > 0) std::memcpy(out + at(r), in + at(r), block_bytes);
  for (int k = 1; k < n; ++k) ctx.Wait((r + n - k) % n, Tag(phase::kAllToAll, 0));
  ctx.Finish();
}

}  // namespace tandem::collective
