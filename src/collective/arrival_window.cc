#include "collective/arrival_window.h"

#include "tandem/error.h"

namespace tandem::collective {

ArrivalWindow::ArrivalWindow(std::vector<std::pair<int, uint64_t>> pieces)
    : pieces_(std::move(pieces)), taken_(pieces_.size(), 0) {}

size_t ArrivalWindow::Next(OpContext& ctx) {
  if (done()) throw InvalidArgument("ArrivalWindow::Next: every piece was already returned");
  candidates_.clear();
  candidate_index_.clear();
  for (size_t i = head_; i < pieces_.size() && candidates_.size() < kWindow; ++i) {
    if (taken_[i]) continue;
    candidates_.push_back(pieces_[i]);
    candidate_index_.push_back(i);
  }
  const size_t index = candidate_index_[ctx.WaitAny(candidates_)];
  taken_[index] = 1;
  while (head_ < pieces_.size() && taken_[head_]) ++head_;
  return index;
}

}  // namespace tandem::collective
