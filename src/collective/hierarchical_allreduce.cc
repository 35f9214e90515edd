// Hierarchical allreduce: the ranks of each host reduce among themselves,
// only one slice per rank crosses the network, and the result is shared on
// each host again (Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE; NCCL's split of
// intra-node and inter-node steps).
//
// Layout: H hosts with L ranks each (HostLayout::PerHost; the group's
// members as the node table places them). Local rank l of a host is the
// l-th of its group ranks in ascending order.
//
// Stages, each a ring on a sub-group of the operation (OpContext::Narrow,
// which keeps the pieces of the stages apart):
//   1. ring reduce-scatter among the L ranks of each host: the vector is cut
//      into L blocks and local rank l ends with block l summed over its
//      host;
//   2. ring allreduce of block l among the H ranks of local rank l, one per
//      host: L rings run side by side, each on its own slice, and each
//      applies `finalize` to the sub-block it owns;
//   3. ring allgather among the L ranks of each host: every rank ends with
//      every block.
//
// Bytes, for a vector of S bytes: across each host's link
// 2(H-1)/H * S leave (L slices of S/L, each 2(H-1)/H of its slice), the
// least any allreduce among H hosts sends; a flat ring over the H*L ranks
// in host order sends 2(HL-1)/(HL) * S over the one ring edge that leaves
// the host (H=4, L=2: 1.5 S against 1.75 S, at most 1.17x less), and with
// ranks that alternate between hosts up to L times that. Within a host each
// rank sends and receives 2(L-1)/L * S more, over the same-host copy or
// loopback. Steps in sequence: 2(L-1) + 2(H-1) against the flat ring's
// 2(HL-1), so it also takes fewer latency-bound steps.
//
// Order of combination: each element is combined along its host's ring,
// then the hosts' partial sums along the slice's ring; every rank ends with
// the same bits (stage 3 copies, never recombines).
#include <cstring>
#include <map>

#include "collective/algorithms.h"
#include "tandem/error.h"

namespace tandem::collective {

HostLayout HostLayout::Of(const std::vector<std::string>& host_of_rank) {
  HostLayout layout;
  std::map<std::string, size_t> index;
  for (size_t r = 0; r < host_of_rank.size(); ++r) {
    auto [it, added] = index.emplace(host_of_rank[r], layout.hosts.size());
    if (added) layout.hosts.emplace_back();
    layout.hosts[it->second].push_back(static_cast<int>(r));
  }
  return layout;
}

int HostLayout::PerHost() const {
  if (hosts.empty()) return 0;
  const size_t per = hosts.front().size();
  for (const auto& h : hosts) {
    if (h.size() != per) return 0;
  }
  return static_cast<int>(per);
}

void HierarchicalAllReduce(OpContext& ctx, const ReduceSpec& spec, const std::byte* in,
                           std::byte* out, size_t count, const HostLayout& layout,
                           std::span<std::byte> scratch, size_t segment_elements,
                           const Finalize& finalize) {
  const int per_host = layout.PerHost();
  if (per_host == 0) {
    throw InvalidArgument(ctx.what() +
                          ": hierarchical allreduce needs as many ranks on every host");
  }
  // This rank's host and local rank.
  size_t host = 0;
  size_t local = 0;
  for (size_t h = 0; h < layout.hosts.size(); ++h) {
    for (size_t l = 0; l < layout.hosts[h].size(); ++l) {
      if (layout.hosts[h][l] == ctx.rank()) {
        host = h;
        local = l;
      }
    }
  }
  const size_t es = spec.element_size;
  const Blocks blocks = Blocks::Even(count, per_host);
  if (in != out && per_host == 1 && count > 0) std::memcpy(out, in, count * es);
  {
    auto on_host = ctx.Narrow(layout.hosts[host], 1);
    RingReduceScatter(ctx, spec, in, out, blocks, -1, scratch, segment_elements);
  }
  {
    std::vector<int> column;
    for (const auto& h : layout.hosts) column.push_back(h[local]);
    auto across = ctx.Narrow(std::move(column), 2);
    std::byte* slice = out + blocks.offset[local] * es;
    RingAllReduceSteps(ctx, spec, slice, slice, blocks.count[local], scratch, segment_elements,
                       finalize);
  }
  // Stage 3 overwrites the blocks that stage 1 sent from.
  ctx.AwaitSends();
  {
    auto on_host = ctx.Narrow(layout.hosts[host], 3);
    RingAllGatherPost(ctx, out, blocks, 0, es, segment_elements);
    RingAllGatherRun(ctx, out, blocks, 0, es, segment_elements);
  }
  ctx.Finish();
}

}  // namespace tandem::collective
