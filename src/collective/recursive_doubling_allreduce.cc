// Recursive-doubling allreduce: the fewest messages for small vectors.
//
// Idea: log2(p) rounds among p = the largest power of two <= n ranks. In
// round k each rank swaps its whole partial vector with the rank whose
// (folded) index differs in bit k and combines the two; after the last
// round every rank holds the full reduction. A group that is not a power
// of two first folds: of the first 2(n - p) ranks, each even one sends its
// vector to the odd one after it, which combines the two and takes part;
// at the end each odd one sends the result back (two more sequential
// messages for those ranks).
//
// Steps: log2(p) (+2 for folded ranks); messages per rank: log2(p) out and
// in, against direct's n-1 and halving-doubling's 2 log2(n). Bytes on the
// wire per rank: log2(p) times the vector each way. Where a message costs
// its CPU (syscalls, wake-ups) rather than its bytes, fewer messages is
// what counts: 4 ranks on 2 cores, TCP, docs/benchmarks.md ("The TCP path").
//
// Every rank gets the same bits: the two partners of a round evaluate the
// same expression on the same two partial vectors (the lower index's
// first); folded ranks receive a copy. A round overwrites the vector it
// sent, so it first waits for that send to let go of it (a large piece is
// sent from the caller's memory). Tags Tag(kRecursiveDoubling, round); the fold and the
// unfold use rounds kFoldRound and kUnfoldRound.
#include <cstring>

#include "collective/algorithms.h"

namespace tandem::collective {

namespace {
constexpr uint64_t kFoldRound = 0xFFFFF0;
constexpr uint64_t kUnfoldRound = 0xFFFFF1;
}  // namespace

void RecursiveDoublingAllReduce(OpContext& ctx, const ReduceSpec& spec, std::byte* data,
                                size_t count, std::span<std::byte> scratch,
                                const Finalize& finalize) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const size_t bytes = count * spec.element_size;
  const std::span<std::byte> mine(data, bytes);
  const std::span<std::byte> theirs = scratch.first(bytes);
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extra = n - p;
  // Fold: of ranks 0 .. 2*extra-1, the even ones hand their vector to the
  // odd one after them and sit out the rounds.
  int folded_index = -1;  // this rank's index among the p that take part
  if (r < 2 * extra) {
    if (r % 2 == 0) {
      ctx.Post(r + 1, Tag(phase::kRecursiveDoubling, kUnfoldRound), mine);
      ctx.Send(r + 1, Tag(phase::kRecursiveDoubling, kFoldRound), mine);
      ctx.Wait(r + 1, Tag(phase::kRecursiveDoubling, kUnfoldRound));
      ctx.Finish();
      return;
    }
    ctx.Post(r - 1, Tag(phase::kRecursiveDoubling, kFoldRound), theirs);
    ctx.Wait(r - 1, Tag(phase::kRecursiveDoubling, kFoldRound));
    base::ReduceInto(spec.op, spec.dtype, data, theirs.data(), data, count);  // lower rank first
    folded_index = r / 2;
  } else {
    folded_index = r - extra;
  }
  auto rank_of = [&](int index) { return index < extra ? index * 2 + 1 : index + extra; };
  uint64_t round = 0;
  for (int mask = 1; mask < p; mask <<= 1, ++round) {
    const int partner = rank_of(folded_index ^ mask);
    ctx.Post(partner, Tag(phase::kRecursiveDoubling, round), theirs);
    ctx.Send(partner, Tag(phase::kRecursiveDoubling, round), mine);
    ctx.Wait(partner, Tag(phase::kRecursiveDoubling, round));
    // A large send may still be read from `data` (zero-copy, or by the
    // peer itself on one host): let it go before combining into it. Small
    // ones were copied and are done.
    ctx.AwaitSends();
    // Both partners evaluate the same expression, lower index first.
    if (folded_index < (folded_index ^ mask)) {
      base::ReduceInto(spec.op, spec.dtype, data, data, theirs.data(), count);
    } else {
      base::ReduceInto(spec.op, spec.dtype, data, theirs.data(), data, count);
    }
  }
  // Every rank that took part holds the same bits; each finalizes its own.
  if (finalize) finalize(data, count);
  if (r < 2 * extra) ctx.Send(r - 1, Tag(phase::kRecursiveDoubling, kUnfoldRound), mine);
  ctx.Finish();
}

}  // namespace tandem::collective
