// Binomial-tree broadcast, pipelined in segments.
//
// Idea: number the ranks relative to the root, v = (rank - root) mod n.
// Rank v's parent is v with its lowest set bit cleared; its children are
// v + 2^k for every 2^k below that bit (the root: below the highest power
// of two < n) while v + 2^k < n. Data flows from the root down the tree,
// which reaches all n ranks in ceil(log2 n) rounds; a rank sends to its
// largest subtree first.
//
// Pipelining: the vector travels in segments of `segment_bytes`; a rank
// posts every segment's receive into its place in `data`, and forwards each
// segment to its children as soon as it arrived, so the tree's levels work
// on different segments at once.
//
// Steps: ceil(log2 n) levels (plus one per extra segment along a path).
// Bytes on the wire: each rank receives the vector once; a rank sends it
// once per child (the root ceil(log2 n) times). Tags Tag(kBroadcast, 0, j).
// A zero-byte broadcast still sends one empty segment, so it synchronises
// like any other.
//
// Call check: the root receives nothing of the data, so every other rank
// also sends it one empty piece (Tag(kBroadcast, 1, 0)) as it starts, and
// the root waits for them after its own sends: the root learns every
// rank's call (docs/collectives.md "Call checks"), and every other rank
// checks its parent's, whose data it uses. The pieces travel while the
// data does, so the root's time grows by at most one small message.
#include <algorithm>

#include "collective/algorithms.h"

namespace tandem::collective {

void TreeBroadcast(OpContext& ctx, std::span<std::byte> data, int root, size_t segment_bytes) {
  const int n = ctx.size();
  const int v = (ctx.rank() - root + n) % n;
  auto real = [&](int u) { return (u + root) % n; };
  const size_t seg = std::max<size_t>(segment_bytes, 1);
  const size_t segments = std::max<size_t>((data.size() + seg - 1) / seg, 1);
  auto piece = [&](size_t j) {
    const size_t first = j * seg;
    return data.subspan(std::min(first, data.size()),
                        std::min(seg, data.size() - std::min(first, data.size())));
  };

  int mask = 1;
  int parent = -1;
  while (mask < n) {
    if (v & mask) {
      parent = v - mask;
      break;
    }
    mask <<= 1;
  }
  std::vector<int> children;
  for (int d = mask >> 1; d > 0; d >>= 1) {
    if (v + d < n) children.push_back(real(v + d));
  }
  const uint64_t check = Tag(phase::kBroadcast, 1, 0);
  const bool checked = ctx.checked();
  if (parent >= 0) {
    if (checked) ctx.Send(root, check, {});
    for (size_t j = 0; j < segments; ++j)
      ctx.Post(real(parent), Tag(phase::kBroadcast, 0, j), piece(j));
  } else if (checked) {
    for (int r = 0; r < n; ++r) {
      if (r != root) ctx.Post(r, check, {});
    }
  }
  for (size_t j = 0; j < segments; ++j) {
    if (parent >= 0) ctx.Wait(real(parent), Tag(phase::kBroadcast, 0, j));
    for (int child : children) ctx.Send(child, Tag(phase::kBroadcast, 0, j), piece(j));
  }
  if (parent < 0 && checked) {
    for (int r = 0; r < n; ++r) {
      if (r != root) ctx.Wait(r, check);
    }
  }
  ctx.Finish();
}

}  // namespace tandem::collective
