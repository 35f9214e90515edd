// A worker's key table (docs/kvstore.md, "Keys").
#include "kv/key_registry.h"

#include <fmt/format.h>

#include "base/dtype.h"
#include "tandem/error.h"

namespace tandem {

std::string KVKey::ToString() const {
  return is_string() ? fmt::format("\"{}\"", string_key()) : std::to_string(int_key());
}

}  // namespace tandem

namespace tandem::kv {

std::string ShapeText(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

KeyInfo& KeyRegistry::Add(const KVKey& key, const TensorView& value) {
  const Kind kind = key.is_string() ? Kind::kString : Kind::kInt;
  if (kind_ != Kind::kNone && kind_ != kind) {
    throw InvalidArgument(fmt::format(
        "key {}: this store already uses {} keys; mixing int and string keys is not allowed",
        key.ToString(), kind_ == Kind::kInt ? "int" : "string"));
  }
  if (!key.is_string() && key.int_key() < 0) {
    throw InvalidArgument(fmt::format("key {}: int keys must not be negative", key.int_key()));
  }
  if (ElementSize(value.dtype) == 0) {
    throw InvalidArgument(fmt::format("key {}: dtype value {} is not a tandem dtype",
                                      key.ToString(), static_cast<int>(value.dtype)));
  }
  for (int64_t d : value.shape) {
    if (d < 0) {
      throw InvalidArgument(fmt::format("key {}: shape {} has a negative dimension", key.ToString(),
                                        ShapeText(value.shape)));
    }
  }
  if (value.data == nullptr && value.num_elements() > 0) {
    throw InvalidArgument(fmt::format("key {}: init value has no data", key.ToString()));
  }
  KeyInfo info;
  info.name = key.ToString();
  info.dtype = value.dtype;
  info.shape = value.shape;
  info.elements = static_cast<uint64_t>(value.num_elements());
  if (value.shape.size() >= 2 && value.shape[0] > 0) {
    info.row_length = info.elements / static_cast<uint64_t>(value.shape[0]);
  }
  if (info.row_length == 0) info.row_length = 1;
  if (key.is_string()) {
    if (by_string_.contains(key.string_key())) {
      throw InvalidArgument(
          fmt::format("key {}: double init: expected a new key, got one already "
                      "initialised",
                      info.name));
    }
    info.id = by_string_.size();
    kind_ = kind;
    return by_string_.emplace(key.string_key(), std::move(info)).first->second;
  }
  if (by_int_.contains(key.int_key())) {
    throw InvalidArgument(fmt::format(
        "key {}: double init: expected a new key, got one already initialised", info.name));
  }
  info.id = static_cast<uint64_t>(key.int_key());
  kind_ = kind;
  return by_int_.emplace(key.int_key(), std::move(info)).first->second;
}

KeyInfo& KeyRegistry::Find(const KVKey& key, std::string_view what) {
  if (key.is_string()) {
    auto it = by_string_.find(key.string_key());
    if (it != by_string_.end()) return it->second;
  } else {
    auto it = by_int_.find(key.int_key());
    if (it != by_int_.end()) return it->second;
  }
  throw InvalidArgument(
      fmt::format("key {}: {} of a key that was never initialised (expected Init before {})",
                  key.ToString(), what, what));
}

void KeyRegistry::CheckRows(const KeyInfo& info, const TensorView& rows,
                            const std::vector<int64_t>& row_ids, std::string_view what) {
  if (info.shape.empty()) {
    throw InvalidArgument(
        fmt::format("key {}: {} of a scalar key (it has no rows)", info.name, what));
  }
  std::vector<int64_t> want = info.shape;
  want[0] = static_cast<int64_t>(row_ids.size());
  if (rows.dtype != info.dtype || rows.shape != want ||
      (rows.data == nullptr && rows.num_elements() > 0)) {
    throw InvalidArgument(
        fmt::format("key {}: {} of {} rows expected {} {}, got {} {}", info.name, what,
                    row_ids.size(), base::DTypeName(info.dtype), ShapeText(want),
                    ElementSize(rows.dtype) ? base::DTypeName(rows.dtype) : "an unknown dtype",
                    ShapeText(rows.shape)));
  }
  for (size_t i = 0; i < row_ids.size(); ++i) {
    if (row_ids[i] < 0 || row_ids[i] >= info.shape[0] || (i > 0 && row_ids[i] <= row_ids[i - 1])) {
      throw InvalidArgument(fmt::format(
          "key {}: {}: row ids must be strictly ascending in [0, {}), got {} at position {}",
          info.name, what, info.shape[0], row_ids[i], i));
    }
  }
}

void KeyRegistry::Check(const KeyInfo& info, const TensorView& t, std::string_view what) {
  if (t.dtype != info.dtype) {
    throw InvalidArgument(fmt::format("key {}: {} expected dtype {}, got {}", info.name, what,
                                      base::DTypeName(info.dtype),
                                      ElementSize(t.dtype) ? std::string(base::DTypeName(t.dtype))
                                                           : std::string("an unknown dtype")));
  }
  if (t.shape != info.shape) {
    throw InvalidArgument(fmt::format(
        "key {}: {} expected shape {} ({} elements), got {} ({} elements)", info.name, what,
        ShapeText(info.shape), info.elements, ShapeText(t.shape), t.num_elements()));
  }
  if (t.data == nullptr && info.elements > 0) {
    throw InvalidArgument(fmt::format("key {}: {} got a tensor without data", info.name, what));
  }
}

KeyInfo* KeyRegistry::FindById(uint64_t id) {
  KeyInfo* found = nullptr;
  ForEach([&](KeyInfo& info) {
    if (info.id == id) found = &info;
  });
  return found;
}

}  // namespace tandem::kv
