// Blocks: how the ring algorithms cut a vector into one block per rank.
#include "collective/algorithms.h"

namespace tandem::collective {

Blocks Blocks::Even(size_t total, int n) {
  Blocks b;
  const size_t un = static_cast<size_t>(n);
  size_t at = 0;
  for (size_t i = 0; i < un; ++i) {
    size_t c = total / un + (i < total % un ? 1 : 0);
    b.offset.push_back(at);
    b.count.push_back(c);
    at += c;
  }
  return b;
}

Blocks Blocks::Of(const std::vector<size_t>& counts) {
  Blocks b;
  size_t at = 0;
  for (size_t c : counts) {
    b.offset.push_back(at);
    b.count.push_back(c);
    at += c;
  }
  return b;
}

}  // namespace tandem::collective
