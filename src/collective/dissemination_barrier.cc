// Dissemination barrier (Hensgen, Finkel and Manber).
//
// Idea: in round k (distance d = 2^k, while d < n) rank r sends an empty
// message to r + d and waits for one from r - d (mod n). After
// ceil(log2 n) rounds every rank has heard, directly or through others,
// from every rank that entered the barrier, so none leaves before all
// entered.
//
// Steps: ceil(log2 n); bytes on the wire: headers only. Tags
// Tag(kBarrier, k).
#include "collective/algorithms.h"

namespace tandem::collective {

void DisseminationBarrier(OpContext& ctx) {
  const int n = ctx.size();
  const int r = ctx.rank();
  uint64_t round = 0;
  for (int d = 1; d < n; d *= 2, ++round) {
    ctx.Post((r + n - d) % n, Tag(phase::kBarrier, round), {});
    ctx.Send((r + d) % n, Tag(phase::kBarrier, round), {});
    ctx.Wait((r + n - d) % n, Tag(phase::kBarrier, round));
  }
  ctx.Finish();
}

}  // namespace tandem::collective
