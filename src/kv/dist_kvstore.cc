// The distributed store's worker side (docs/kvstore.md; docs/protocol-ps.md).
#include "kv/dist_kvstore.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <exception>

#include "base/dtype.h"
#include "cluster/membership.h"
#include "cluster/node_services.h"
#include "kv/device_sum.h"
#include "kv/optimizer/optimizer.h"
#include "tandem/error.h"

namespace tandem::kv {

namespace {

UpdateMode ModeOf(const std::string& type) {
  if (IsDistributedType(type)) {
    return type.starts_with("dist_sync") ? UpdateMode::kSync : UpdateMode::kAsync;
  }
  throw InvalidArgument(fmt::format(
      "kvstore type '{}' is not distributed (expected dist_sync, dist_async, dist_sync_device or "
      "dist_async_device)",
      type));
}

std::span<const std::byte> Bytes(const void* base, uint64_t offset, uint64_t count, size_t elem) {
  return {static_cast<const std::byte*>(base) + offset * elem, count * elem};
}

}  // namespace

bool IsDistributedType(const std::string& type) {
  return type == "dist_sync" || type == "dist_sync_device" || type == "dist_async" ||
         type == "dist_async_device";
}

DistKVStore::DistKVStore(std::string type, KvClient& client, StoreSettings settings,
                         std::unique_ptr<Cluster> membership)
    : membership_(std::move(membership)),
      type_(std::move(type)),
      client_(client),
      settings_(settings),
      mode_(ModeOf(type_)) {
  RequireServers();
  if (settings_.balanced_placement) {
    std::vector<std::string> server_hosts(static_cast<size_t>(client_.num_servers()));
    std::vector<std::string> worker_hosts(static_cast<size_t>(client_.num_workers()));
    for (const NodeInfo& n : client_.services().membership.table().nodes) {
      if (n.role == Role::kServer) server_hosts.at(static_cast<size_t>(n.rank)) = n.host;
      if (n.role == Role::kWorker) worker_hosts.at(static_cast<size_t>(n.rank)) = n.host;
    }
    shares_ = BalancedShares(server_hosts, worker_hosts);
    client_.services().log.V1("balanced key placement: server shares {}", fmt::join(shares_, ", "));
  }
}

void DistKVStore::RequireServers() const {
  if (client_.num_servers() < 1) {
    throw ConfigError(
        fmt::format("kvstore '{}' needs at least one server, and the job has none "
                    "(DMLC_NUM_SERVER=0): start it "
                    "with servers, e.g. tandem launch -n 2 -s 1 -- ...",
                    type_));
  }
}

void DistKVStore::Leave() {
  if (!membership_ || left_) return;
  left_ = true;  // set first: a failed barrier is not tried again
  membership_->Finalize();
}

DistKVStore::~DistKVStore() {
  if (!membership_) return;
  if (left_) {
    // Leave() met the others (or reported why it could not).
  } else if (std::uncaught_exceptions() > 0) {
    // The program is ending on an exception: the others may be blocked in a
    // push that needs this worker, and a final barrier would wait for them
    // as they wait for it. Leaving without it tells them at once (they fail
    // with PeerLost naming this worker).
    client_.services().log.Warn(
        "leaving the job without its final barrier: an exception ends "
        "this program");
  } else {
    try {
      membership_->Finalize();
    } catch (const std::exception& e) {
      client_.services().log.Error("leaving the job failed: {}", e.what());
    }
  }
  membership_.reset();
}

KeyRequest DistKVStore::Request(const KeyInfo& info, const KeySlice& slice, int priority) const {
  KeyRequest q;
  q.key = info.id;
  q.worker_rank = client_.rank();
  q.dtype = info.dtype;
  q.mode = mode_;
  q.total_elements = info.elements;
  q.offset = slice.offset;
  q.count = slice.count;
  // A compressed key is sliced on words, not rows.
  q.row_length = info.residual.empty() ? info.row_length : 1;
  q.priority = priority;
  return q;
}

void DistKVStore::Init(const KVKey& key, const TensorView& value) {
  KeyInfo info;
  {
    std::lock_guard lock(mu_);
    KeyInfo& added = keys_.Add(key, value);
    if (compression_.type != CompressionType::kNone && added.dtype == DType::kF32) {
      // Sliced on whole words as MXNet's EncodeCompressedKey; Init itself
      // travels uncompressed, in the same slices.
      const uint64_t per_word = compression_.type == CompressionType::kOneBit ? 32 : 16;
      added.slices = PlaceCompressedKey(added.id, added.elements, per_word, client_.num_servers(),
                                        settings_.big_array_bound, shares_);
      added.residual.assign(added.elements, 0.0f);
    } else {
      added.slices = PlaceKey(added.id, added.elements, added.row_length, client_.num_servers(),
                              settings_.big_array_bound, shares_);
    }
    info = added;
  }
  // As MXNet: only worker 0 sends the value; the others wait in the barrier
  // until it is on the servers.
  FirstWorkerThenBarrier(fmt::format("init of key {}", info.name), [&] {
    auto op =
        std::make_shared<KvOperation>(fmt::format("init of key {}", info.name), client_.timeout());
    std::vector<ClientRequest> requests;
    const size_t elem = ElementSize(info.dtype);
    for (const KeySlice& s : info.slices) {
      ClientRequest r;
      r.server = s.server;
      r.type = kvmsg::kInit;
      r.key = info.id;
      r.meta = Request(info, s, 0).Encode();
      if (s.count) r.payload.push_back(Bytes(value.data, s.offset, s.count, elem));
      requests.push_back(std::move(r));
    }
    client_.Submit(op, std::move(requests));
    op->Wait();
  });
}

const void* DistKVStore::SumIfNeeded(const KeyInfo& info, const std::vector<TensorView>& values,
                                     const std::shared_ptr<KvOperation>& op) {
  if (values.size() == 1) return values[0].data;  // sent straight from the caller's memory
  auto sum = std::make_shared<std::vector<std::byte>>(info.elements * ElementSize(info.dtype));
  base::ThreadPool* pool = nullptr;
  if (settings_.reduction_threads > 1 && info.elements >= settings_.big_array_bound) {
    std::lock_guard lock(mu_);
    if (!pool_) {
      pool_ = std::make_unique<base::ThreadPool>(
          static_cast<size_t>(settings_.reduction_threads - 1), "kv-reduce");
    }
    pool = pool_.get();
  }
  SumDeviceValues(values, sum->data(), pool, settings_.big_array_bound);
  op->Keep(sum);
  return sum->data();
}

KVHandle DistKVStore::SendPush(const KeyInfo& info, const void* source, void* out, int priority,
                               std::shared_ptr<KvOperation> op) {
  const size_t elem = ElementSize(info.dtype);
  {
    std::lock_guard lock(mu_);
    ++const_cast<KeyInfo&>(info).pushes;
  }
  std::vector<ClientRequest> requests;
  for (const KeySlice& s : info.slices) {
    ClientRequest r;
    r.server = s.server;
    r.type = out ? kvmsg::kPushPull : kvmsg::kPush;
    r.key = info.id;
    r.priority = priority;
    KeyRequest q = Request(info, s, priority);
    if (!info.residual.empty() && s.count) {
      // Compressed with the key's residual (error feedback); the words are
      // kept alive by the operation until sent.
      CompressionParams params;
      {
        std::lock_guard lock(mu_);
        params = compression_;
      }
      auto words = std::make_shared<std::vector<std::byte>>(CompressedBytes(params, s.count));
      {
        std::lock_guard lock(mu_);
        auto* values = static_cast<const float*>(source) + s.offset;
        Compress(params, std::span<const float>(values, s.count),
                 std::span<float>(const_cast<KeyInfo&>(info).residual).subspan(s.offset, s.count),
                 *words);
      }
      q.encoding = params.type == CompressionType::kOneBit ? PayloadEncoding::kOneBit
                                                           : PayloadEncoding::kTwoBit;
      q.threshold = params.threshold;
      r.payload.push_back(std::span<const std::byte>(*words));
      op->Keep(words);
    } else if (s.count) {
      r.payload.push_back(Bytes(source, s.offset, s.count, elem));
    }
    r.meta = q.Encode();
    if (out && s.count) {
      r.destination = {static_cast<std::byte*>(out) + s.offset * elem, s.count * elem};
    }
    requests.push_back(std::move(r));
  }
  client_.Submit(op, std::move(requests));
  return KVHandle(std::move(op));
}

KVHandle DistKVStore::PushAsync(const KVKey& key, const std::vector<TensorView>& values,
                                int priority) {
  KeyInfo* info;
  {
    std::lock_guard lock(mu_);
    info = &keys_.Find(key, "push");
  }
  if (values.empty()) throw InvalidArgument(fmt::format("key {}: push of no values", info->name));
  for (const auto& v : values) KeyRegistry::Check(*info, v, "push");
  auto op =
      std::make_shared<KvOperation>(fmt::format("push of key {}", info->name), client_.timeout());
  const void* source = SumIfNeeded(*info, values, op);
  return SendPush(*info, source, nullptr, priority, std::move(op));
}

KVHandle DistKVStore::PushPullAsync(const KVKey& key, const std::vector<TensorView>& values,
                                    const std::vector<TensorView>& outs, int priority) {
  KeyInfo* info;
  {
    std::lock_guard lock(mu_);
    info = &keys_.Find(key, "push-pull");
  }
  if (values.empty() || outs.empty()) {
    throw InvalidArgument(fmt::format("key {}: push-pull needs values and outputs", info->name));
  }
  for (const auto& v : values) KeyRegistry::Check(*info, v, "push-pull value");
  for (const auto& o : outs) KeyRegistry::Check(*info, o, "push-pull output");
  auto op = std::make_shared<KvOperation>(fmt::format("push-pull of key {}", info->name),
                                          client_.timeout());
  const void* source = SumIfNeeded(*info, values, op);
  const size_t bytes = info->elements * ElementSize(info->dtype);
  std::vector<TensorView> rest(outs.begin() + 1, outs.end());
  void* first = outs[0].data;
  // outs[0] may alias a value: the reply only arrives after the push was
  // read, so receiving into it is safe.
  op->OnSuccess([rest, first, bytes] {
    for (const auto& o : rest) {
      if (o.data != first) std::memcpy(o.data, first, bytes);
    }
  });
  return SendPush(*info, source, first, priority, std::move(op));
}

KVHandle DistKVStore::PullAsync(const KVKey& key, const std::vector<TensorView>& outs,
                                int priority) {
  KeyInfo* info;
  {
    std::lock_guard lock(mu_);
    info = &keys_.Find(key, "pull");
  }
  if (outs.empty()) throw InvalidArgument(fmt::format("key {}: pull into no outputs", info->name));
  for (const auto& o : outs) KeyRegistry::Check(*info, o, "pull output");
  auto op =
      std::make_shared<KvOperation>(fmt::format("pull of key {}", info->name), client_.timeout());
  const size_t elem = ElementSize(info->dtype);
  const size_t bytes = info->elements * elem;
  std::vector<TensorView> rest(outs.begin() + 1, outs.end());
  void* first = outs[0].data;
  op->OnSuccess([rest, first, bytes] {
    for (const auto& o : rest) {
      if (o.data != first) std::memcpy(o.data, first, bytes);
    }
  });
  std::vector<ClientRequest> requests;
  for (const KeySlice& s : info->slices) {
    ClientRequest r;
    r.server = s.server;
    r.type = kvmsg::kPull;
    r.key = info->id;
    r.priority = priority;
    r.meta = Request(*info, s, priority).Encode();
    if (s.count) r.destination = {static_cast<std::byte*>(first) + s.offset * elem, s.count * elem};
    requests.push_back(std::move(r));
  }
  client_.Submit(op, std::move(requests));
  return KVHandle(std::move(op));
}

KVHandle DistKVStore::RowSparsePullAsync(const KVKey& key, const TensorView& out,
                                         const std::vector<int64_t>& row_ids, int priority) {
  KeyInfo* info;
  {
    std::lock_guard lock(mu_);
    info = &keys_.Find(key, "row-sparse pull");
  }
  KeyRegistry::CheckRows(*info, out, row_ids, "row-sparse pull");
  if (!info->residual.empty()) {
    throw InvalidArgument(fmt::format(
        "key {}: row-sparse pull of a key pushed compressed (not supported, as in MXNet)",
        info->name));
  }
  auto op = std::make_shared<KvOperation>(fmt::format("row-sparse pull of key {}", info->name),
                                          client_.timeout());
  const size_t row_bytes = info->row_length * ElementSize(info->dtype);
  std::vector<ClientRequest> requests;
  size_t next = 0;
  for (const KeySlice& s : info->slices) {
    const uint64_t first_row = s.offset / info->row_length;
    const uint64_t end_row = first_row + s.count / info->row_length;
    size_t begin = next;
    while (next < row_ids.size() && static_cast<uint64_t>(row_ids[next]) < end_row) ++next;
    if (next == begin) continue;  // no requested row lives there
    ClientRequest r;
    r.server = s.server;
    r.type = kvmsg::kRowSparsePull;
    r.key = info->id;
    r.priority = priority;
    KeyRequest q = Request(*info, s, priority);
    q.rows.assign(row_ids.begin() + static_cast<ptrdiff_t>(begin),
                  row_ids.begin() + static_cast<ptrdiff_t>(next));
    r.meta = q.Encode();
    r.destination = {static_cast<std::byte*>(out.data) + begin * row_bytes,
                     (next - begin) * row_bytes};
    (void)first_row;
    requests.push_back(std::move(r));
  }
  if (requests.empty()) return KVHandle();
  client_.Submit(op, std::move(requests));
  return KVHandle(std::move(op));
}

KVHandle DistKVStore::RowSparsePushAsync(const KVKey& key, const TensorView& rows,
                                         const std::vector<int64_t>& row_ids, int priority) {
  KeyInfo* info;
  {
    std::lock_guard lock(mu_);
    info = &keys_.Find(key, "row-sparse push");
  }
  KeyRegistry::CheckRows(*info, rows, row_ids, "row-sparse push");
  if (!info->residual.empty()) {
    throw InvalidArgument(fmt::format(
        "key {}: row-sparse push of a key pushed compressed (not supported, as in MXNet)",
        info->name));
  }
  auto op = std::make_shared<KvOperation>(fmt::format("row-sparse push of key {}", info->name),
                                          client_.timeout());
  {
    std::lock_guard lock(mu_);
    ++info->pushes;
  }
  const size_t row_bytes = info->row_length * ElementSize(info->dtype);
  std::vector<ClientRequest> requests;
  size_t next = 0;
  for (const KeySlice& s : info->slices) {
    const uint64_t end_row = (s.offset + s.count) / info->row_length;
    size_t begin = next;
    while (next < row_ids.size() && static_cast<uint64_t>(row_ids[next]) < end_row) ++next;
    // Every slice gets a push, with no rows if none live there: a dist_sync
    // round counts one push per worker on every server.
    ClientRequest r;
    r.server = s.server;
    r.type = kvmsg::kPush;
    r.key = info->id;
    r.priority = priority;
    KeyRequest q = Request(*info, s, priority);
    q.encoding = PayloadEncoding::kRowSparse;
    q.rows.assign(row_ids.begin() + static_cast<ptrdiff_t>(begin),
                  row_ids.begin() + static_cast<ptrdiff_t>(next));
    r.meta = q.Encode();
    if (next > begin) {
      r.payload.push_back({static_cast<const std::byte*>(rows.data) + begin * row_bytes,
                           (next - begin) * row_bytes});
    }
    requests.push_back(std::move(r));
  }
  client_.Submit(op, std::move(requests));
  return KVHandle(std::move(op));
}

void DistKVStore::Broadcast(uint16_t type, const std::string& meta, const std::string& what) {
  auto op = std::make_shared<KvOperation>(what, client_.timeout());
  std::vector<ClientRequest> requests;
  for (int s = 0; s < client_.num_servers(); ++s) {
    ClientRequest r;
    r.server = s;
    r.type = type;
    r.key = UINT64_MAX;  // commands keep their order among themselves
    r.meta = meta;
    requests.push_back(std::move(r));
  }
  if (requests.empty()) return;
  client_.Submit(op, std::move(requests));
  op->Wait();
}

void DistKVStore::SetOptimizer(const std::string& name, const KVParams& params) {
  OptimizerCommand cmd;
  cmd.name = name;
  cmd.params.assign(params.begin(), params.end());
  // Every worker checks the parameters before anything is sent, with the
  // servers' own code: a refusal reaches every worker that asked, and no
  // server sees a value it would refuse.
  try {
    Optimizer::Create(name, OptimizerParams(cmd.params.begin(), cmd.params.end()));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("set_optimizer: {}", e.what()));
  }
  FirstWorkerThenBarrier(fmt::format("set-optimizer {}", name), [&] {
    Broadcast(kvmsg::kSetOptimizer, cmd.Encode(), fmt::format("set-optimizer {}", name));
  });
}

void DistKVStore::FirstWorkerThenBarrier(const std::string& what,
                                         const std::function<void()>& step) {
  cluster::Membership& membership = client_.services().membership;
  const int first = membership.workers().front();
  std::exception_ptr error;
  if (client_.rank() == first) {
    try {
      step();
    } catch (const PeerLost&) {
      throw;
    } catch (...) {
      error = std::current_exception();  // the others must not wait in vain
    }
  }
  // The members at the barrier's release, not now: a worker that left after
  // the release had done its part (it arrived only once its step was done).
  const Members released = membership.Barrier(group::kWorkers);
  if (error) std::rethrow_exception(error);
  const std::vector<int>& at = released.workers;
  if (std::find(at.begin(), at.end(), first) == at.end()) {
    throw PeerLost(fmt::format(
        "{}: worker {}, which was to do it for every worker, left the job during the call "
        "(membership epoch {}); whether the servers have it is unknown (docs/elastic.md)",
        what, first, released.epoch));
  }
}

void DistKVStore::SetGradientCompression(const KVParams& params) {
  CompressionParams parsed = ParseCompressionParams(params);
  std::lock_guard lock(mu_);
  if (!keys_.empty()) {
    throw InvalidArgument(
        "set gradient compression before the first Init: a compressed key is sliced across the "
        "servers on whole words, so its placement is fixed at Init");
  }
  compression_ = parsed;
}

Members DistKVStore::Barrier() { return client_.services().membership.Barrier(group::kWorkers); }

}  // namespace tandem::kv
