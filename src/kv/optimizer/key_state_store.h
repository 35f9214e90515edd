// The per-key state of an optimizer (update count, states such as momentum,
// the float32 master copy of a float16 weight) and the table that holds it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "tandem/tensor.h"

namespace tandem::kv {

/// One key's optimizer state. Its buffers are zero-initialised when the key
/// is first updated (the master copy starts as the weight), as MXNet's
/// create_state does.
///
/// Thread-safety: touched only by the thread that updates its key (the
/// caller serialises updates of one key), or by Save/LoadStates, which run
/// when no update does.
struct KeyState {
  DType weight_dtype = DType::kF32;  ///< dtype of the weight it belongs to
  DType state_dtype = DType::kF32;   ///< dtype of every array in `arrays`
  uint64_t elements = 0;             ///< elements of the weight and of each array
  int64_t update_count = 0;          ///< MXNet's _index_update_count[key]
  bool has_master = false;    ///< a float16 weight under multi_precision keeps a float32 copy
  std::vector<float> master;  ///< that copy (`elements` values) when has_master
  std::vector<std::vector<std::byte>> arrays;  ///< the optimizer's states, in its order
};

/// Every key's KeyState.
///
/// Thread-safety: Find and FindOrInsert may run concurrently from any
/// threads (a shared lock for lookups, an exclusive one only to insert a
/// new key); a KeyState never moves once inserted. Replace and ForEach must
/// not run concurrently with anything else.
class KeyStateStore {
 public:
  /// The state of `key`, or nullptr.
  KeyState* Find(uint64_t key) const;

  /// The state of `key`; when absent, inserts `make()`'s result. Returns the
  /// state and whether it was inserted now.
  std::pair<KeyState*, bool> FindOrInsert(uint64_t key,
                                          const std::function<std::unique_ptr<KeyState>()>& make);

  /// Replaces every key's state.
  void Replace(std::map<uint64_t, std::unique_ptr<KeyState>> states);

  /// Calls `f(key, state)` for every key in increasing key order.
  void ForEach(const std::function<void(uint64_t, const KeyState&)>& f) const;

  /// The number of keys.
  size_t size() const;

 private:
  mutable std::shared_mutex mu_;
  std::unordered_map<uint64_t, std::unique_ptr<KeyState>> states_;
};

}  // namespace tandem::kv
