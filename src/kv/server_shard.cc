// A server shard: init, push (sync merge or async update), pull, and the
// server-wide commands (docs/protocol-ps.md; docs/kvstore.md, "Server").
#include "kv/server_shard.h"

#include <fmt/format.h>
#include <pthread.h>

#include <cstring>
#include <exception>

#include "base/dtype.h"
#include "kv/compression/gradient_compression.h"
#include "tandem/error.h"

namespace tandem::kv {
namespace {

std::string SliceText(const KeyRequest& q) {
  return fmt::format("{} {} elements [{}, {}) of {}", q.count, base::DTypeName(q.dtype), q.offset,
                     q.offset + q.count, q.total_elements);
}

// A request must address the slice exactly as it was initialised.
void CheckLayout(const KeyRequest& held, const KeyRequest& q, std::string_view what) {
  if (q.dtype != held.dtype || q.total_elements != held.total_elements || q.offset != held.offset ||
      q.count != held.count || q.row_length != held.row_length) {
    throw InvalidArgument(
        fmt::format("key {}: {} expected {} (row length {}), got {} (row length {})", q.key, what,
                    SliceText(held), held.row_length, SliceText(q), q.row_length));
  }
}

TensorView View(DType dtype, ByteBuffer& b, uint64_t count) {
  return TensorView{b.data.get(), dtype, {static_cast<int64_t>(count)}};
}

}  // namespace

ServerShard::ServerShard(const ShardContext& context, int index)
    : ctx_(context), index_(index), thread_([this] { Loop(); }) {
  // Shows in top -H and /proc/<pid>/task/*/comm (kv_bench reads it).
  pthread_setname_np(thread_.native_handle(), fmt::format("kv-shard/{}", index).c_str());
}

ServerShard::~ServerShard() { Stop(); }

void ServerShard::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ServerShard::Start() {
  {
    std::lock_guard lock(mu_);
    started_ = true;
  }
  cv_.notify_all();
}

void ServerShard::Post(ShardItem item) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(item));
  }
  if (ctx_.queued) ctx_.queued->Add(1);
  cv_.notify_one();
}

void ServerShard::Loop() {
  for (;;) {
    ShardItem item;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || (started_ && !queue_.empty()); });
      if (stopping_) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    if (ctx_.queued) ctx_.queued->Add(-1);
    if (item.rendezvous) {
      item.rendezvous->Arrive();
      continue;
    }
    if (item.departed_worker) {
      Depart(*item.departed_worker);
      continue;
    }
    Handle(item);
  }
}

void ServerShard::Handle(ShardItem& item) {
  const net::Header& h = item.msg.header;
  try {
    switch (h.type) {
      case kvmsg::kInit:
        HandleInit(item);
        break;
      case kvmsg::kPush:
      case kvmsg::kPushPull:
        HandlePush(item);
        break;
      case kvmsg::kPull:
      case kvmsg::kRowSparsePull:
        HandlePull(item);
        break;
      default:
        HandleControl(item);
        break;
    }
  } catch (const InvalidArgument& e) {
    Failed(item, ErrorKind::kInvalidArgument, e);
  } catch (const ProtocolError& e) {
    Failed(item, ErrorKind::kProtocol, e);
  } catch (const std::exception& e) {
    Failed(item, ErrorKind::kOther, e);
  }
}

void ServerShard::Failed(const ShardItem& item, ErrorKind kind, const std::exception& e) {
  const net::Header& h = item.msg.header;
  // Worker 0 sends these for the whole job (MXNet's optimizer command): the
  // other workers would go on with a store that is not what their script
  // asked for, so the job stops (docs/protocol-ps.md, "Errors").
  const bool job_wide = h.type == kvmsg::kSetOptimizer || h.type == kvmsg::kSaveOptimizerStates ||
                        h.type == kvmsg::kLoadOptimizerStates;
  if (job_wide) {
    ctx_.log->Error("shard {}: {} from node {} failed: {}", index_, KvMessageName(h.type), h.sender,
                    e.what());
  } else if (kind == ErrorKind::kInvalidArgument) {
    ctx_.log->V1("shard {}: {} from node {} failed: {}", index_, KvMessageName(h.type), h.sender,
                 e.what());
  } else {
    ctx_.log->Warn("shard {}: {} from node {} {}: {}", index_, KvMessageName(h.type), h.sender,
                   kind == ErrorKind::kProtocol ? "broke the protocol" : "failed", e.what());
  }
  // The request to stop goes before the reply: worker 0, told first, could
  // exit before the scheduler heard why, and the others would then blame it.
  if (job_wide && ctx_.stop_job) ctx_.stop_job(e);
  ReplyError(item.connection, h, kind, e.what());
}

void ServerShard::HandleInit(ShardItem& item) {
  const KeyRequest& q = *item.request;
  if (q.encoding != PayloadEncoding::kDense) {
    throw InvalidArgument(
        fmt::format("key {}: init must be dense (it is never compressed)", q.key));
  }
  auto it = keys_.find(q.key);
  if (it != keys_.end()) {
    throw InvalidArgument(fmt::format("key {}: double init: expected no value, got one holding {}",
                                      q.key, SliceText(it->second.layout)));
  }
  const uint64_t want = q.ExpectedPushBytes();
  if (item.msg.payload.bytes.size() != want) {
    throw InvalidArgument(fmt::format("key {}: init value expected {} bytes ({}), got {}", q.key,
                                      want, SliceText(q), item.msg.payload.bytes.size()));
  }
  StoredKey& k = keys_[q.key];
  k.layout = q;
  k.layout.rows.clear();
  k.value = MakeValue(DenseGradient(q, item.msg));
  ctx_.log->V2("shard {}: key {} initialised ({})", index_, q.key, SliceText(q));
  ReplyAck(item.connection, item.msg.header);
}

ByteBuffer ServerShard::DenseGradient(const KeyRequest& q, net::Message& msg) const {
  const size_t elem = ElementSize(q.dtype);
  switch (q.encoding) {
    case PayloadEncoding::kDense:
      if (msg.payload.owned)
        return ByteBuffer{std::move(msg.payload.owned), msg.payload.bytes.size()};
      return ByteBuffer::CopyOf(msg.payload.bytes);
    case PayloadEncoding::kRowSparse: {
      ByteBuffer dense = ctx_.pool->Take(q.count * elem);
      if (dense.size) std::memset(dense.data.get(), 0, dense.size);
      const uint64_t first_row = q.offset / q.row_length;
      const size_t row_bytes = q.row_length * elem;
      for (size_t i = 0; i < q.rows.size(); ++i) {
        std::memcpy(dense.data.get() + (q.rows[i] - first_row) * row_bytes,
                    msg.payload.bytes.data() + i * row_bytes, row_bytes);
      }
      return dense;
    }
    case PayloadEncoding::kOneBit:
    case PayloadEncoding::kTwoBit: {
      // As MXNet's server: dequantise, then merge like any push.
      CompressionParams params;
      params.type = q.encoding == PayloadEncoding::kOneBit ? CompressionType::kOneBit
                                                           : CompressionType::kTwoBit;
      params.threshold = q.threshold;
      ByteBuffer dense = ctx_.pool->Take(q.count * sizeof(float));
      Decompress(params, msg.payload.bytes,
                 std::span<float>(reinterpret_cast<float*>(dense.data.get()), q.count));
      return dense;
    }
  }
  throw ProtocolError(fmt::format("key {}: unknown payload encoding", q.key));
}

void ServerShard::HandlePush(ShardItem& item) {
  const KeyRequest& q = *item.request;
  const net::Header& h = item.msg.header;
  auto it = keys_.find(q.key);
  if (it == keys_.end()) {
    throw InvalidArgument(fmt::format(
        "key {}: push before init: expected an initialised key, got none (worker 0 must Init it)",
        q.key));
  }
  StoredKey& k = it->second;
  CheckLayout(k.layout, q, "push");
  if (q.worker_rank >= ctx_.num_workers) {
    throw ProtocolError(fmt::format("key {}: push from worker rank {}, but the job has {} workers",
                                    q.key, q.worker_rank, ctx_.num_workers));
  }
  if (departed_.contains(q.worker_rank)) {
    throw InvalidArgument(fmt::format(
        "key {}: push from worker {}, which has left the job (docs/elastic.md): refused", q.key,
        q.worker_rank));
  }
  const uint64_t want = q.ExpectedPushBytes();
  if (item.msg.payload.bytes.size() != want) {
    throw InvalidArgument(fmt::format("key {}: push expected {} payload bytes, got {}", q.key, want,
                                      item.msg.payload.bytes.size()));
  }
  if (q.mode == UpdateMode::kSync && k.merge.HasPushed(q.worker_rank)) {
    Park(k, item);  // its round has not ended yet
    return;
  }
  if (q.mode == UpdateMode::kAsync) {
    if (!ctx_.optimizer->active()) {
      throw InvalidArgument(fmt::format(
          "key {}: dist_async needs an optimizer on the servers (MXNet: \"Updater needs to be set "
          "for async mode\"); expected SetOptimizer before the first push, got none",
          q.key));
    }
    ByteBuffer grad = DenseGradient(q, item.msg);
    if (q.encoding == PayloadEncoding::kRowSparse) {
      const std::set<uint64_t> rows(q.rows.begin(), q.rows.end());
      ApplyUpdate(q.key, k, grad, &rows);
    } else {
      ApplyUpdate(q.key, k, grad, nullptr);
    }
    ctx_.pool->Give(std::move(grad));
    if (h.type == kvmsg::kPushPull) {
      ReplyValue(item.connection, h, k.value);
    } else {
      ReplyAck(item.connection, h);
    }
    return;
  }
  if (q.encoding == PayloadEncoding::kRowSparse) {
    k.round_rows.insert(q.rows.begin(), q.rows.end());
  } else {
    k.round_dense = true;
  }
  ctx_.pool->Give(k.merge.Add(q.worker_rank, ctx_.num_workers, DenseGradient(q, item.msg), q.dtype,
                              q.count, PendingAck{item.connection, h}));
  if (k.merge.pushed() == 1 && ctx_.open_rounds) ctx_.open_rounds->Add(1);
  if (RoundComplete(k)) {
    FinishRound(q.key, k);
  } else {
    SendReceipt(item.connection, h, Receipt::State::kMerged);
  }
}

bool ServerShard::RoundComplete(const StoredKey& k) const {
  // A departed worker's push that arrived before it left stays in its round.
  int departed_pushed = 0;
  for (int w : departed_) departed_pushed += k.merge.HasPushed(w) ? 1 : 0;
  return k.merge.pushed() > 0 && k.merge.pushed() - departed_pushed ==
                                     ctx_.num_workers - static_cast<int>(departed_.size());
}

void ServerShard::Depart(int worker) {
  if (worker < 0 || worker >= ctx_.num_workers || !departed_.insert(worker).second) return;
  int ended = 0;
  for (auto& [key, k] : keys_) {
    // Its parked requests are answered, and refused, once their round ends.
    if (RoundComplete(k)) {
      FinishRound(key, k);
      ++ended;
    }
  }
  ctx_.log->V1("shard {}: worker {} left the job; {} dist_sync rounds ended without it", index_,
               worker, ended);
}

void ServerShard::FinishRound(uint64_t key, StoredKey& k) {
  std::vector<PendingAck> acks;
  ByteBuffer merged = k.merge.TakeMerged(&acks);
  if (ctx_.open_rounds) ctx_.open_rounds->Add(-1);
  const bool sparse_round = !k.round_dense;
  std::set<uint64_t> rows;
  rows.swap(k.round_rows);
  k.round_dense = false;
  std::string failure;
  if (ctx_.optimizer->active()) {
    try {
      // A round of row-sparse pushes only updates lazily, as MXNet's server
      // applies a merged row-sparse gradient.
      ApplyUpdate(key, k, merged, sparse_round ? &rows : nullptr);
      ctx_.pool->Give(std::move(merged));
    } catch (const std::exception& e) {
      failure = fmt::format("key {}: the update of this round failed: {}", key, e.what());
      ctx_.log->Warn("{}", failure);
    }
  } else {
    // MXNet's server without an updater copies the merged sum into the value.
    k.value = MakeValue(std::move(merged));
  }
  for (const PendingAck& a : acks) {
    if (!failure.empty()) {
      ReplyError(a.connection, a.request, ErrorKind::kOther, failure);
    } else if (a.request.type == kvmsg::kPushPull) {
      ReplyValue(a.connection, a.request, k.value);
    } else {
      ReplyAck(a.connection, a.request);
    }
  }
  Drain(k);
}

void ServerShard::ApplyUpdate(uint64_t key, StoredKey& k, ByteBuffer& grad,
                              const std::set<uint64_t>* rows) {
  const KeyRequest& l = k.layout;
  if (rows == nullptr) {
    Unshare(k);
    ctx_.optimizer->Update(key, View(l.dtype, *k.value, l.count), View(l.dtype, grad, l.count));
    return;
  }
  if (rows->empty()) return;  // no row of this slice was pushed: nothing changes
  // The named rows of the dense gradient, and their numbers within the slice.
  const uint64_t first_row = l.offset / l.row_length;
  const size_t row_bytes = l.row_length * ElementSize(l.dtype);
  ByteBuffer packed = ctx_.pool->Take(rows->size() * row_bytes);
  std::vector<int64_t> local;
  local.reserve(rows->size());
  for (uint64_t r : *rows) {
    std::memcpy(packed.data.get() + local.size() * row_bytes,
                grad.data.get() + (r - first_row) * row_bytes, row_bytes);
    local.push_back(static_cast<int64_t>(r - first_row));
  }
  const auto row_length = static_cast<int64_t>(l.row_length);
  Unshare(k);
  TensorView weight{
      k.value->data.get(), l.dtype, {static_cast<int64_t>(l.count / l.row_length), row_length}};
  TensorView g{packed.data.get(), l.dtype, {static_cast<int64_t>(local.size()), row_length}};
  try {
    ctx_.optimizer->UpdateRows(key, weight, local, g);
  } catch (...) {
    ctx_.pool->Give(std::move(packed));
    throw;
  }
  ctx_.pool->Give(std::move(packed));
}

void ServerShard::Drain(StoredKey& k) {
  if (k.draining) return;  // the outer Drain of this key goes on
  k.draining = true;
  for (;;) {
    auto next = k.waiting.end();
    for (auto it = k.waiting.begin(); it != k.waiting.end(); ++it) {
      if (!k.merge.HasPushed(it->request->worker_rank)) {
        next = it;
        break;
      }
    }
    if (next == k.waiting.end()) break;
    ShardItem item = std::move(*next);
    k.waiting.erase(next);
    Handle(item);
  }
  k.draining = false;
}

void ServerShard::HandlePull(ShardItem& item) {
  const KeyRequest& q = *item.request;
  auto it = keys_.find(q.key);
  if (it == keys_.end()) {
    throw InvalidArgument(fmt::format(
        "key {}: pull of a key the server does not hold: expected an initialised key, got none",
        q.key));
  }
  StoredKey& k = it->second;
  CheckLayout(k.layout, q, "pull");
  if (q.mode == UpdateMode::kSync && k.merge.HasPushed(q.worker_rank)) {
    Park(k, item);  // a pull after a push sees its round
    return;
  }
  if (item.msg.header.type == kvmsg::kPull) {
    ReplyValue(item.connection, item.msg.header, k.value);
    return;
  }
  // Row-sparse pull: only the requested rows travel.
  const size_t row_bytes = q.row_length * ElementSize(q.dtype);
  const uint64_t first_row = q.offset / q.row_length;
  net::OutgoingMessage m;
  m.header = ResponseHeader(item.msg.header, ctx_.self_id);
  m.owned_storage.resize(q.rows.size() * row_bytes);
  for (size_t i = 0; i < q.rows.size(); ++i) {
    std::memcpy(m.owned_storage.data() + i * row_bytes,
                k.value->data.get() + (q.rows[i] - first_row) * row_bytes, row_bytes);
  }
  if (!m.owned_storage.empty()) m.payload.push_back(std::span<const std::byte>(m.owned_storage));
  Send(item.connection, std::move(m));
}

void ServerShard::HandleControl(ShardItem& item) {
  const net::Header& h = item.msg.header;
  switch (h.type) {
    case kvmsg::kSetOptimizer: {
      auto cmd = OptimizerCommand::Decode(item.msg.meta);
      OptimizerParams params(cmd.params.begin(), cmd.params.end());
      ctx_.optimizer->Set(cmd.name, params);
      ctx_.log->V1("optimizer set to {} with {} parameters", cmd.name, params.size());
      break;
    }
    case kvmsg::kSaveOptimizerStates:
      ctx_.optimizer->Save(StatesCommand::Decode(item.msg.meta).path);
      break;
    case kvmsg::kLoadOptimizerStates:
      ctx_.optimizer->Load(StatesCommand::Decode(item.msg.meta).path);
      break;
    default:
      throw ProtocolError(
          fmt::format("{} is not a request this server knows", KvMessageName(h.type)));
  }
  ReplyAck(item.connection, h);
}

namespace {

// Refuses a checkpoint while `k`'s dist_sync round is open.
void RequireRoundBoundary(uint64_t key, const SyncMerge& merge, size_t waiting, int workers) {
  if (merge.pushed() > 0 || waiting > 0) {
    throw InvalidArgument(fmt::format(
        "key {}: a dist_sync round is in progress ({} of {} workers pushed, {} requests waiting): "
        "a checkpoint needs every push waited for on every worker first",
        key, merge.pushed(), workers, waiting));
  }
}

}  // namespace

void ServerShard::ExportKeys(std::vector<SavedKey>* out) const {
  for (const auto& [key, k] : keys_) {
    RequireRoundBoundary(key, k.merge, k.waiting.size(), ctx_.num_workers);
    SavedKey s;
    s.key = key;
    s.dtype = k.layout.dtype;
    s.total_elements = k.layout.total_elements;
    s.offset = k.layout.offset;
    s.count = k.layout.count;
    s.row_length = k.layout.row_length;
    s.value.assign(reinterpret_cast<const char*>(k.value->data.get()), k.value->size);
    out->push_back(std::move(s));
  }
}

void ServerShard::CheckRestorable(const std::map<uint64_t, const SavedKey*>& saved,
                                  std::set<uint64_t>* matched) const {
  for (const auto& [key, k] : keys_) {
    RequireRoundBoundary(key, k.merge, k.waiting.size(), ctx_.num_workers);
    auto it = saved.find(key);
    if (it == saved.end()) {
      throw InvalidArgument(fmt::format(
          "key {}: this server holds it, the checkpoint does not (the job's keys differ from the "
          "checkpointed job's)",
          key));
    }
    const SavedKey& s = *it->second;
    const KeyRequest& l = k.layout;
    if (s.dtype != l.dtype || s.total_elements != l.total_elements || s.offset != l.offset ||
        s.count != l.count || s.row_length != l.row_length) {
      KeyRequest held = l;
      KeyRequest file = l;
      file.dtype = s.dtype;
      file.total_elements = s.total_elements;
      file.offset = s.offset;
      file.count = s.count;
      throw InvalidArgument(fmt::format(
          "key {}: this server holds {} (row length {}), the checkpoint {} (row length {})", key,
          SliceText(held), l.row_length, SliceText(file), s.row_length));
    }
    matched->insert(key);
  }
}

void ServerShard::RestoreKeys(const std::map<uint64_t, const SavedKey*>& saved) {
  for (auto& [key, k] : keys_) {
    const SavedKey& s = *saved.at(key);
    ByteBuffer b = ctx_.pool->Take(s.value.size());
    if (b.size) std::memcpy(b.data.get(), s.value.data(), b.size);
    k.value = MakeValue(std::move(b));
  }
}

void ServerShard::Unshare(StoredKey& k) const {
  // Only this thread makes new references, so a count of 1 stays 1.
  if (k.value.use_count() > 1) {
    ByteBuffer copy = ctx_.pool->Take(k.value->size);
    if (copy.size) std::memcpy(copy.data.get(), k.value->data.get(), copy.size);
    k.value = MakeValue(std::move(copy));
  }
}

std::shared_ptr<ByteBuffer> ServerShard::MakeValue(ByteBuffer b) const {
  BufferPool* pool = ctx_.pool;
  return std::shared_ptr<ByteBuffer>(new ByteBuffer(std::move(b)), [pool](ByteBuffer* v) {
    pool->Give(std::move(*v));
    delete v;
  });
}

void ServerShard::ReplyValue(net::ConnectionId c, const net::Header& request,
                             const std::shared_ptr<ByteBuffer>& value) {
  net::OutgoingMessage m;
  m.header = ResponseHeader(request, ctx_.self_id);
  if (value->size) m.payload.push_back(std::span<const std::byte>(value->span()));
  // The value stays alive (and unchanged: copy-on-write) until it is sent.
  std::shared_ptr<const ByteBuffer> hold = value;
  m.on_sent = [hold](std::exception_ptr) {};
  Send(c, std::move(m));
}

void ServerShard::ReplyAck(net::ConnectionId c, const net::Header& request) {
  net::OutgoingMessage m;
  m.header = ResponseHeader(request, ctx_.self_id);
  Send(c, std::move(m));
}

void ServerShard::ReplyError(net::ConnectionId c, const net::Header& request, ErrorKind kind,
                             const std::string& text) {
  net::OutgoingMessage m;
  m.header = ResponseHeader(request, ctx_.self_id, net::flags::kError);
  m.meta = ErrorReply{kind, text}.Encode();
  Send(c, std::move(m));
}

void ServerShard::Park(StoredKey& k, ShardItem& item) {
  const net::ConnectionId c = item.connection;
  const net::Header h = item.msg.header;
  k.waiting.push_back(std::move(item));
  SendReceipt(c, h, Receipt::State::kParked);
}

void ServerShard::SendReceipt(net::ConnectionId c, const net::Header& request,
                              Receipt::State state) {
  // A merged push's bytes live on only in the round's sum: they leave the
  // books before the worker can learn of it (Send releases them,
  // request_window.h). A parked request stays booked until its answer.
  net::OutgoingMessage m;
  m.header = ResponseHeader(request, ctx_.self_id);
  m.header.type = kvmsg::kReceipt;
  m.meta = Receipt{state}.Encode();
  if (state == Receipt::State::kMerged) {
    Send(c, std::move(m));
  } else {
    Transmit(c, std::move(m));
  }
}

void ServerShard::Send(net::ConnectionId c, net::OutgoingMessage m) {
  // Before the reply leaves: the worker may send its next request the
  // moment the reply arrives (request_window.h).
  if (ctx_.window) ctx_.window->Release(c, m.header.request_id);
  Transmit(c, std::move(m));
}

void ServerShard::Transmit(net::ConnectionId c, net::OutgoingMessage m) {
  const uint16_t type = m.header.type;
  try {
    ctx_.transport->Send(c, std::move(m));
  } catch (const std::exception& e) {
    ctx_.log->Warn("shard {}: {} reply on connection {} failed: {}", index_, KvMessageName(type), c,
                   e.what());
  }
}

}  // namespace tandem::kv
