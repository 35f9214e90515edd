// The order in which an algorithm handles the pieces it receives: the
// earliest of a short window of expected pieces that has arrived, not
// strictly the next one. With several connections per pair the pieces of
// one step travel on different TCP streams, and a stream stalled by a lost
// packet holds back only its own pieces: the operation's thread handles and
// forwards the ones behind it on other streams meanwhile, so the next rank
// of a ring does not idle too (docs/collectives.md, "Pipelining").
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "collective/op_context.h"

namespace tandem::collective {

/// Thread-safety: used by the one thread that runs the operation.
class ArrivalWindow {
 public:
  /// How many of the expected pieces, from the earliest not yet handled,
  /// Next() considers.
  static constexpr size_t kWindow = 8;

  /// `pieces` are (group peer, tag), posted, in the order the algorithm
  /// would wait for them one by one.
  explicit ArrivalWindow(std::vector<std::pair<int, uint64_t>> pieces);

  /// True once Next() returned every piece.
  bool done() const { return head_ == pieces_.size(); }

  /// Waits for the first of the window's pieces to complete and returns its
  /// index in the list given to the constructor. Throws as OpContext::Wait.
  /// Requires !done().
  size_t Next(OpContext& ctx);

 private:
  std::vector<std::pair<int, uint64_t>> pieces_;
  std::vector<char> taken_;
  size_t head_ = 0;  // the first piece not yet returned
  std::vector<std::pair<int, uint64_t>> candidates_;
  std::vector<size_t> candidate_index_;
};

}  // namespace tandem::collective
