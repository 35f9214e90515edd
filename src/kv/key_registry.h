// A worker's table of initialised keys: the number each key travels as,
// its dtype and shape, and where its slices live (docs/kvstore.md, "Keys").
//
// Int keys travel as themselves; string keys get the numbers 0, 1, 2, ... in
// the order this worker initialised them (every worker must initialise them
// in the same order, as with MXNet's string keys). One store takes keys of
// one kind only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kv/key_placement.h"
#include "tandem/kvstore.h"
#include "tandem/tensor.h"

namespace tandem::kv {

struct KeyInfo {
  std::string name;  ///< KVKey::ToString(), for messages
  uint64_t id = 0;   ///< the number on the wire
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t elements = 0;
  uint64_t row_length = 1;       ///< elements per row of the first dimension
  std::vector<KeySlice> slices;  ///< empty for a local store
  std::vector<float> residual;   ///< gradient compression's error feedback
  /// Pushes of this key since the store began or loaded a checkpoint (the
  /// store's round: docs/checkpoints.md, "Rounds").
  uint64_t pushes = 0;
};

/// "[2, 3]".
std::string ShapeText(const std::vector<int64_t>& shape);

/// Thread-safety: guarded by its owner (the store's mutex).
class KeyRegistry {
 public:
  /// Registers `key` with `value`'s dtype and shape. Throws InvalidArgument
  /// for a double init, mixed key kinds, a negative int key, a null tensor
  /// with elements, a dtype outside the enum or a negative dimension.
  KeyInfo& Add(const KVKey& key, const TensorView& value);

  /// The initialised `key`. Throws InvalidArgument naming the key and `what`
  /// ("push", ...) when it was never initialised.
  KeyInfo& Find(const KVKey& key, std::string_view what);

  /// Throws InvalidArgument unless `t` matches the key's dtype and shape,
  /// naming the key, `what`, the expected and the given.
  /// True before the first Add.
  bool empty() const { return by_int_.empty() && by_string_.empty(); }

  /// Throws InvalidArgument unless `rows` holds `row_ids.size()` rows of
  /// the key (dtype and trailing shape) and the ids are strictly ascending
  /// row numbers of the key. `what` names the call.
  static void CheckRows(const KeyInfo& info, const TensorView& rows,
                        const std::vector<int64_t>& row_ids, std::string_view what);

  static void Check(const KeyInfo& info, const TensorView& t, std::string_view what);

  /// The key that travels as `id`, or null.
  KeyInfo* FindById(uint64_t id);

  /// Calls f(KeyInfo&) for every key, in key order.
  template <typename F>
  void ForEach(F f) {
    for (auto& [key, info] : by_int_) f(info);
    for (auto& [key, info] : by_string_) f(info);
  }

 private:
  enum class Kind { kNone, kInt, kString };
  Kind kind_ = Kind::kNone;
  std::map<int, KeyInfo> by_int_;
  std::map<std::string, KeyInfo> by_string_;
};

}  // namespace tandem::kv
