// Key placement (docs/kvstore.md, "Placement").
#include "kv/key_placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "tandem/error.h"

namespace tandem::kv {

namespace {

// Checks `shares` against the server count (empty: equal shares).
void CheckShares(uint64_t key, int num_servers, std::span<const double> shares) {
  if (shares.empty()) return;
  if (shares.size() != static_cast<size_t>(num_servers)) {
    throw InvalidArgument(fmt::format("placing key {}: {} server shares for {} servers", key,
                                      shares.size(), num_servers));
  }
  double total = 0;
  for (size_t i = 0; i < shares.size(); ++i) {
    if (!std::isfinite(shares[i]) || shares[i] < 0) {
      throw InvalidArgument(fmt::format("placing key {}: server {}'s share is {} (expected >= 0)",
                                        key, i, shares[i]));
    }
    total += shares[i];
  }
  if (total <= 0) {
    throw InvalidArgument(fmt::format("placing key {}: every server's share is 0", key));
  }
}

// The ends of the `servers` consecutive parts of `units`: MXNet's
// round(units / S * (i + 1)) for equal shares, else round(units * c / T)
// with c the shares of parts 0..i and T their total; the last ends at
// `units` (no rounding loss).
std::vector<uint64_t> CutEnds(uint64_t units, uint64_t servers, std::span<const double> shares) {
  double total = 0;
  for (double share : shares) total += share;
  std::vector<uint64_t> ends;
  double cumulative = 0;
  for (uint64_t i = 0; i + 1 < servers; ++i) {
    if (shares.empty()) {
      const double per = static_cast<double>(units) / static_cast<double>(servers);
      ends.push_back(static_cast<uint64_t>(std::round(per * static_cast<double>(i + 1))));
    } else {
      cumulative += shares[i];
      ends.push_back(std::min(units, static_cast<uint64_t>(std::round(static_cast<double>(units) *
                                                                      cumulative / total))));
    }
  }
  ends.push_back(units);
  return ends;
}

// The server of a key below the bound: MXNet's hash over the servers with
// a share.
int SmallKeyServer(uint64_t key, int num_servers, std::span<const double> shares) {
  if (shares.empty()) return static_cast<int>((key * 9973u) % static_cast<uint64_t>(num_servers));
  std::vector<int> eligible;
  for (size_t i = 0; i < shares.size(); ++i) {
    if (shares[i] > 0) eligible.push_back(static_cast<int>(i));
  }
  return eligible[(key * 9973u) % eligible.size()];
}

}  // namespace

std::vector<KeySlice> PlaceKey(uint64_t key, uint64_t elements, uint64_t row_length,
                               int num_servers, uint64_t big_array_bound,
                               std::span<const double> shares) {
  if (num_servers < 1) {
    throw InvalidArgument(fmt::format("placing key {}: the job has no servers", key));
  }
  if (row_length == 0 || elements % row_length != 0) {
    throw InvalidArgument(
        fmt::format("placing key {}: row length {} does not divide its {} elements", key,
                    row_length, elements));
  }
  CheckShares(key, num_servers, shares);
  const auto servers = static_cast<uint64_t>(num_servers);
  if (elements < big_array_bound || elements == 0) {
    // MXNet's "simple heuristic for load balance": a multiplicative hash.
    return {KeySlice{SmallKeyServer(key, num_servers, shares), 0, elements}};
  }
  const uint64_t rows = elements / row_length;
  const std::vector<uint64_t> ends = CutEnds(rows, servers, shares);
  std::vector<KeySlice> out;
  uint64_t begin = 0;
  for (uint64_t i = 0; i < servers; ++i) {
    const uint64_t end = std::max(begin, ends[i]);
    if (end > begin) {
      out.push_back({static_cast<int>(i), begin * row_length, (end - begin) * row_length});
    }
    begin = end;
  }
  return out;
}

std::vector<KeySlice> PlaceCompressedKey(uint64_t key, uint64_t elements, uint64_t values_per_word,
                                         int num_servers, uint64_t big_array_bound,
                                         std::span<const double> shares) {
  if (values_per_word == 0) {
    throw InvalidArgument(fmt::format("placing key {}: 0 values per word", key));
  }
  if (num_servers < 1 || elements < big_array_bound || elements == 0) {
    return PlaceKey(key, elements, 1, num_servers, big_array_bound, shares);
  }
  CheckShares(key, num_servers, shares);
  const auto servers = static_cast<uint64_t>(num_servers);
  const uint64_t words = (elements + values_per_word - 1) / values_per_word;
  const std::vector<uint64_t> ends = CutEnds(words, servers, shares);
  std::vector<KeySlice> out;
  uint64_t begin = 0;
  for (uint64_t i = 0; i < servers; ++i) {
    const uint64_t end_word = ends[i];
    uint64_t end = i + 1 == servers ? elements : std::min(elements, end_word * values_per_word);
    if (end > begin) out.push_back({static_cast<int>(i), begin, end - begin});
    begin = std::max(begin, end);
  }
  return out;
}

std::vector<double> BalancedShares(const std::vector<std::string>& server_hosts,
                                   const std::vector<std::string>& worker_hosts) {
  if (server_hosts.empty() || worker_hosts.empty()) {
    throw InvalidArgument(fmt::format(
        "balanced key placement needs servers and workers; the job has {} servers and {} workers",
        server_hosts.size(), worker_hosts.size()));
  }
  const std::set<std::string> with_worker(worker_hosts.begin(), worker_hosts.end());
  std::vector<bool> colocated;
  double c = 0;
  for (const std::string& h : server_hosts) {
    colocated.push_back(with_worker.contains(h));
    c += colocated.back() ? 1 : 0;
  }
  const double k = static_cast<double>(server_hosts.size()) - c;
  const double n = static_cast<double>(worker_hosts.size());
  const double denominator = k * (n - 2) + n * c;
  if (c == 0 || k == 0 || denominator <= 0) {
    // One kind of server only, or one worker (whose link carries the same
    // whatever the split): MXNet's equal cut.
    return std::vector<double>(server_hosts.size(), 1.0 / static_cast<double>(server_hosts.size()));
  }
  const double x = std::max(0.0, (n - k) / denominator);
  const double y = (1 - c * x) / k;
  std::vector<double> shares;
  for (bool co : colocated) shares.push_back(co ? x : y);
  return shares;
}

}  // namespace tandem::kv
