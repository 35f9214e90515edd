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
// Call check: data flows only down the tree, so a rank would otherwise
// depend on its ancestors alone. As it starts, every other rank sends the
// root one empty piece (Tag(kBroadcast, 1, 0)) and the root sends every
// other rank one (Tag(kBroadcast, 2, 0)); the root sends no data before it
// has them all. Every rank's data then depends on every rank's call, and
// ranks that disagree about the root still exchange a piece, whose
// fingerprint tells them (docs/collectives.md "Call checks"). It costs one
// small message of latency before the data moves.
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
  const uint64_t from_root = Tag(phase::kBroadcast, 2, 0);
  const bool checked = ctx.checked();
  if (parent >= 0) {
    if (checked) {
      ctx.Post(root, from_root, {});
      ctx.Send(root, check, {});
    }
    for (size_t j = 0; j < segments; ++j)
      ctx.Post(real(parent), Tag(phase::kBroadcast, 0, j), piece(j));
  } else if (checked) {
    for (int r = 0; r < n; ++r) {
      if (r == root) continue;
      ctx.Post(r, check, {});
      ctx.Send(r, from_root, {});
    }
  }
  if (parent < 0 && checked) {
    for (int r = 0; r < n; ++r) {
      if (r != root) ctx.Wait(r, check);
    }
  }
  for (size_t j = 0; j < segments; ++j) {
    if (parent >= 0) ctx.Wait(real(parent), Tag(phase::kBroadcast, 0, j));
    for (int child : children) ctx.Send(child, Tag(phase::kBroadcast, 0, j), piece(j));
  }
  if (parent >= 0 && checked) ctx.Wait(root, from_root);
  ctx.Finish();
}

}  // namespace tandem::collective
