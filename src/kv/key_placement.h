// Which server holds which part of a key (docs/kvstore.md, "Placement").
//
// As MXNet 1.9's KVStoreDist::EncodeDefaultKey: an array of fewer than
// MXNET_KVSTORE_BIGARRAY_BOUND elements lives whole on server
// (key * 9973) % num_servers; a larger one is cut into num_servers
// contiguous slices, slice i spanning
// [round(n * i / S), round(n * (i + 1) / S)) (rounded half away from zero,
// as std::round). Row-sparse keys are cut the same way in whole rows.
//
// With shares (TANDEM_KV_PLACEMENT=balanced, BalancedShares below) a large
// array is cut in proportion to them instead, slice i spanning
// [round(n * c_i / T), round(n * c_{i+1} / T)) with c_i the sum of the
// shares of servers 0..i-1 and T their total; a small one lives on server
// e[(key * 9973) % |e|], e the servers with a share above zero in rank
// order (so equal shares place small keys as MXNet does).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tandem::kv {

/// One server's part of a key.
struct KeySlice {
  int server = 0;       ///< server rank
  uint64_t offset = 0;  ///< first element
  uint64_t count = 0;   ///< elements
};

/// MXNET_KVSTORE_BIGARRAY_BOUND's default, as MXNet.
inline constexpr uint64_t kDefaultBigArrayBound = 1000000;

/// The slices of a key of `elements` elements laid out in rows of
/// `row_length` elements (1 for a dense key), in server order; slices are
/// never empty unless the array is (then one empty slice on the key's
/// server). `shares`, when not empty, holds one non-negative weight per
/// server (at least one above zero) and cuts large arrays in proportion to
/// them (see above); empty is MXNet's equal cut. Requires num_servers >= 1,
/// row_length >= 1 dividing `elements`, key >= 0. Pure; any thread. Throws
/// InvalidArgument otherwise, naming the key and what was wrong.
std::vector<KeySlice> PlaceKey(uint64_t key, uint64_t elements, uint64_t row_length,
                               int num_servers, uint64_t big_array_bound,
                               std::span<const double> shares = {});

/// The slices of a float32 key pushed compressed with `values_per_word`
/// values per 32-bit word (16 for 2bit, 32 for 1bit), as MXNet's
/// EncodeCompressedKey: below the bound as PlaceKey; otherwise the
/// W = ceil(elements / values_per_word) words are split as PlaceKey splits
/// elements (with `shares` as there), slice i taking its words times
/// values_per_word elements and the last slice the rest, so that every slice
/// but the last starts and ends on a word. Pure; any thread. Throws
/// InvalidArgument as PlaceKey.
std::vector<KeySlice> PlaceCompressedKey(uint64_t key, uint64_t elements, uint64_t values_per_word,
                                         int num_servers, uint64_t big_array_bound,
                                         std::span<const double> shares = {});

/// Each server's share of a large key under TANDEM_KV_PLACEMENT=balanced:
/// BytePS's split between servers on a host that also runs a worker
/// ("colocated") and servers on hosts without one ("spare"), chosen so
/// that the busiest link of a worker's host and of a spare server's host
/// carry equal bytes. With n workers (one per host), c colocated and k
/// spare servers, a colocated server takes x = max(0, (n - k) /
/// (k (n - 2) + n c)) of each large key and a spare one y = (1 - c x) / k;
/// with c = 0, k = 0 or n = 1 every server takes 1 / servers. Then a worker's
/// link carries 1 + (n - 2) x and a spare server's n y key sizes each way,
/// against 2 (n - 1) / n for a ring allreduce: 1 + k (n - 2) / n^2 times
/// less when k <= n. `server_hosts` is by server rank, `worker_hosts` by
/// worker rank; a host is the address a node announces, compared as text.
/// Throws InvalidArgument when there are no servers or no workers.
std::vector<double> BalancedShares(const std::vector<std::string>& server_hosts,
                                   const std::vector<std::string>& worker_hosts);

}  // namespace tandem::kv
