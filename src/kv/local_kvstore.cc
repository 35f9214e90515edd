// The single-process stores (docs/kvstore.md, "Local stores").
#include "kv/local_kvstore.h"

#include <fmt/format.h>

#include <cstring>

#include "base/dtype.h"
#include "kv/device_sum.h"
#include "tandem/error.h"

namespace tandem::kv {

LocalKVStore::LocalKVStore(std::string type, StoreSettings settings, OptimizerFactory factory)
    : type_(std::move(type)), settings_(settings), optimizer_(std::move(factory)) {
  if (type_ != "local" && type_ != "device") {
    throw InvalidArgument(
        fmt::format("kvstore type '{}' is not a local one (local or device)", type_));
  }
}

void LocalKVStore::Init(const KVKey& key, const TensorView& value) {
  std::lock_guard lock(mu_);
  KeyInfo& info = keys_.Add(key, value);
  auto& stored = values_[info.id];
  stored.resize(value.num_bytes());
  if (!stored.empty()) std::memcpy(stored.data(), value.data, stored.size());
}

void LocalKVStore::PushLocked(KeyInfo& info, const std::vector<TensorView>& values) {
  if (values.empty()) throw InvalidArgument(fmt::format("key {}: push of no values", info.name));
  for (const auto& v : values) KeyRegistry::Check(info, v, "push");
  if (!pool_ && settings_.reduction_threads > 1 && info.elements >= settings_.big_array_bound) {
    pool_ = std::make_unique<base::ThreadPool>(static_cast<size_t>(settings_.reduction_threads - 1),
                                               "kv-reduce");
  }
  std::vector<std::byte> merged(info.elements * ElementSize(info.dtype));
  SumDeviceValues(values, merged.data(), pool_.get(), settings_.big_array_bound);
  auto& stored = values_.at(info.id);
  if (optimizer_.active()) {
    const std::vector<int64_t> flat{static_cast<int64_t>(info.elements)};
    optimizer_.Update(info.id, TensorView{stored.data(), info.dtype, flat},
                      TensorView{merged.data(), info.dtype, flat});
  } else {
    stored = std::move(merged);  // MXNet's KVStoreLocal without an updater
  }
}

void LocalKVStore::PullLocked(KeyInfo& info, const std::vector<TensorView>& outs) {
  if (outs.empty()) throw InvalidArgument(fmt::format("key {}: pull into no outputs", info.name));
  for (const auto& o : outs) KeyRegistry::Check(info, o, "pull output");
  const auto& stored = values_.at(info.id);
  for (const auto& o : outs) {
    if (!stored.empty()) std::memcpy(o.data, stored.data(), stored.size());
  }
}

KVHandle LocalKVStore::PushAsync(const KVKey& key, const std::vector<TensorView>& values, int) {
  std::lock_guard lock(mu_);
  PushLocked(keys_.Find(key, "push"), values);
  return KVHandle();
}

KVHandle LocalKVStore::PullAsync(const KVKey& key, const std::vector<TensorView>& outs, int) {
  std::lock_guard lock(mu_);
  PullLocked(keys_.Find(key, "pull"), outs);
  return KVHandle();
}

KVHandle LocalKVStore::PushPullAsync(const KVKey& key, const std::vector<TensorView>& values,
                                     const std::vector<TensorView>& outs, int) {
  std::lock_guard lock(mu_);
  KeyInfo& info = keys_.Find(key, "push-pull");
  for (const auto& o : outs) KeyRegistry::Check(info, o, "push-pull output");
  PushLocked(info, values);
  PullLocked(info, outs);
  return KVHandle();
}

KVHandle LocalKVStore::RowSparsePullAsync(const KVKey& key, const TensorView& out,
                                          const std::vector<int64_t>& row_ids, int) {
  std::lock_guard lock(mu_);
  KeyInfo& info = keys_.Find(key, "row-sparse pull");
  KeyRegistry::CheckRows(info, out, row_ids, "row-sparse pull");
  const size_t row_bytes = info.row_length * ElementSize(info.dtype);
  const auto& stored = values_.at(info.id);
  for (size_t i = 0; i < row_ids.size(); ++i) {
    std::memcpy(static_cast<std::byte*>(out.data) + i * row_bytes,
                stored.data() + static_cast<size_t>(row_ids[i]) * row_bytes, row_bytes);
  }
  return KVHandle();
}

KVHandle LocalKVStore::RowSparsePushAsync(const KVKey& key, const TensorView& rows,
                                          const std::vector<int64_t>& row_ids, int) {
  std::lock_guard lock(mu_);
  KeyInfo& info = keys_.Find(key, "row-sparse push");
  KeyRegistry::CheckRows(info, rows, row_ids, "row-sparse push");
  if (optimizer_.active()) {
    // The optimizer's row-sparse update (lazy where MXNet's is).
    const int64_t row_length = static_cast<int64_t>(info.row_length);
    auto& stored = values_.at(info.id);
    optimizer_.UpdateRows(
        info.id, TensorView{stored.data(), info.dtype, {info.shape[0], row_length}}, row_ids,
        TensorView{rows.data, info.dtype, {static_cast<int64_t>(row_ids.size()), row_length}});
    return KVHandle();
  }
  // Without an updater: the named rows in a zero gradient, then as a dense
  // push (the value becomes the push).
  const size_t row_bytes = info.row_length * ElementSize(info.dtype);
  std::vector<std::byte> dense(info.elements * ElementSize(info.dtype));
  for (size_t i = 0; i < row_ids.size(); ++i) {
    std::memcpy(dense.data() + static_cast<size_t>(row_ids[i]) * row_bytes,
                static_cast<const std::byte*>(rows.data) + i * row_bytes, row_bytes);
  }
  PushLocked(info, {TensorView{dense.data(), info.dtype, info.shape}});
  return KVHandle();
}

void LocalKVStore::SetOptimizer(const std::string& name, const KVParams& params) {
  optimizer_.Set(name, params);
}

void LocalKVStore::SetGradientCompression(const KVParams& params) {
  (void)params;
  // As MXNet: compression is for stores that move gradients between devices
  // or machines.
  throw InvalidArgument(fmt::format(
      "gradient compression is not supported by the '{}' kvstore (MXNet supports it for dist "
      "stores)",
      type_));
}

void LocalKVStore::SaveOptimizerStates(const std::string& path) { optimizer_.Save(path); }

void LocalKVStore::LoadOptimizerStates(const std::string& path) { optimizer_.Load(path); }

uint64_t LocalKVStore::SaveCheckpoint(const std::string& dir, std::string_view) {
  throw InvalidArgument(fmt::format(
      "SaveCheckpoint({}): store checkpoints are for distributed stores; a '{}' store lives in "
      "this process, so save your own weights (and SaveOptimizerStates)",
      dir, type_));
}

std::optional<KVCheckpoint> LocalKVStore::LoadCheckpoint(const std::string& dir) {
  throw InvalidArgument(fmt::format(
      "LoadCheckpoint({}): store checkpoints are for distributed stores, not a '{}' store", dir,
      type_));
}

}  // namespace tandem::kv
