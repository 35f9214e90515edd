// Which server holds which part of a key (docs/kvstore.md, "Placement").
//
// As MXNet 1.9's KVStoreDist::EncodeDefaultKey: an array of fewer than
// MXNET_KVSTORE_BIGARRAY_BOUND elements lives whole on server
// (key * 9973) % num_servers; a larger one is cut into num_servers
// contiguous slices, slice i spanning
// [round(n * i / S), round(n * (i + 1) / S)) (rounded half away from zero,
// as std::round). Row-sparse keys are cut the same way in whole rows.
#pragma once

#include <cstdint>
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
/// server). Requires num_servers >= 1, row_length >= 1 dividing `elements`,
/// key >= 0. Pure; any thread. Throws InvalidArgument otherwise.
std::vector<KeySlice> PlaceKey(uint64_t key, uint64_t elements, uint64_t row_length,
                               int num_servers, uint64_t big_array_bound);

/// The slices of a float32 key pushed compressed with `values_per_word`
/// values per 32-bit word (16 for 2bit, 32 for 1bit), as MXNet's
/// EncodeCompressedKey: below the bound as PlaceKey; otherwise the
/// W = ceil(elements / values_per_word) words are split as PlaceKey splits
/// elements, slice i taking its words times values_per_word elements and
/// the last slice the rest, so that every slice but the last starts and ends
/// on a word. Pure; any thread. Throws InvalidArgument as PlaceKey.
std::vector<KeySlice> PlaceCompressedKey(uint64_t key, uint64_t elements, uint64_t values_per_word,
                                         int num_servers, uint64_t big_array_bound);

}  // namespace tandem::kv
