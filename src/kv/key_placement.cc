// Key placement (docs/kvstore.md, "Placement").
#include "kv/key_placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tandem/error.h"

namespace tandem::kv {

std::vector<KeySlice> PlaceKey(uint64_t key, uint64_t elements, uint64_t row_length,
                               int num_servers, uint64_t big_array_bound) {
  if (num_servers < 1) {
    throw InvalidArgument(fmt::format("placing key {}: the job has no servers", key));
  }
  if (row_length == 0 || elements % row_length != 0) {
    throw InvalidArgument(
        fmt::format("placing key {}: row length {} does not divide its {} elements", key,
                    row_length, elements));
  }
  const auto servers = static_cast<uint64_t>(num_servers);
  if (elements < big_array_bound || elements == 0) {
    // MXNet's "simple heuristic for load balance": a multiplicative hash.
    int server = static_cast<int>((key * 9973u) % servers);
    return {KeySlice{server, 0, elements}};
  }
  const uint64_t rows = elements / row_length;
  std::vector<KeySlice> out;
  uint64_t begin = 0;
  for (uint64_t i = 0; i < servers; ++i) {
    const double per = static_cast<double>(rows) / static_cast<double>(servers);
    auto end = static_cast<uint64_t>(std::round(per * static_cast<double>(i + 1)));
    if (i + 1 == servers) end = rows;  // no rounding loss at the end
    if (end > begin) {
      out.push_back({static_cast<int>(i), begin * row_length, (end - begin) * row_length});
    }
    begin = end;
  }
  return out;
}

std::vector<KeySlice> PlaceCompressedKey(uint64_t key, uint64_t elements, uint64_t values_per_word,
                                         int num_servers, uint64_t big_array_bound) {
  if (values_per_word == 0) {
    throw InvalidArgument(fmt::format("placing key {}: 0 values per word", key));
  }
  if (num_servers < 1 || elements < big_array_bound || elements == 0) {
    return PlaceKey(key, elements, 1, num_servers, big_array_bound);
  }
  const auto servers = static_cast<uint64_t>(num_servers);
  const uint64_t words = (elements + values_per_word - 1) / values_per_word;
  std::vector<KeySlice> out;
  uint64_t begin = 0;
  for (uint64_t i = 0; i < servers; ++i) {
    const double per = static_cast<double>(words) / static_cast<double>(servers);
    const auto end_word = static_cast<uint64_t>(std::round(per * static_cast<double>(i + 1)));
    uint64_t end = i + 1 == servers ? elements : std::min(elements, end_word * values_per_word);
    if (end > begin) out.push_back({static_cast<int>(i), begin, end - begin});
    begin = std::max(begin, end);
  }
  return out;
}

}  // namespace tandem::kv
