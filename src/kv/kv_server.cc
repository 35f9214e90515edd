// The parameter server's routing (docs/kvstore.md, "Server").
#include "kv/kv_server.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>

#include "base/byte_io.h"
#include "kv/checkpoint_directory.h"
#include "tandem/error.h"

namespace tandem::kv {

KvServer::Options KvServer::Options::FromEnvironment(const base::Environment& env) {
  Options o;
  const auto cores = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  o.optimizer_factory = [](const std::string& name, const OptimizerParams& params) {
    return Optimizer::Create(name, params);
  };
  o.pool_bytes = static_cast<size_t>(
      env.GetInt("TANDEM_KV_SERVER_POOL_BYTES", static_cast<int64_t>(o.pool_bytes), 0));
  o.threads =
      static_cast<int>(env.GetInt("TANDEM_KV_SERVER_THREADS", std::min<int64_t>(cores, 8), 1, 256));
  o.inflight_bytes = static_cast<uint64_t>(env.GetInt("TANDEM_KV_INFLIGHT_BYTES",
                                                      static_cast<int64_t>(o.inflight_bytes),
                                                      static_cast<int64_t>(kMinInflightBytes)));
  return o;
}

KvServer::KvServer(const cluster::NodeServices& services, Options options)
    : services_(services),
      optimizer_(std::move(options.optimizer_factory)),
      pool_(options.pool_bytes),
      window_(options.inflight_bytes,
              &services_.stats.GetGauge("tandem_kv_server_inflight_bytes",
                                        "Bytes of workers' requests this server received and "
                                        "has not yet answered (queued, merging or waiting for "
                                        "their round)."),
              &services_.stats.GetCounter(
                  "tandem_kv_server_refused_requests_total",
                  "Requests refused because their worker was over TANDEM_KV_INFLIGHT_BYTES "
                  "of unanswered requests at this server.")) {
  if (options.threads < 1) {
    throw InvalidArgument(fmt::format("a server needs at least 1 thread, got {}", options.threads));
  }
  context_.transport = &services_.transport;
  context_.log = &services_.log;
  context_.optimizer = &optimizer_;
  context_.pool = &pool_;
  context_.window = &window_;
  context_.stop_job = [this](const std::exception& cause) { services_.membership.StopJob(cause); };
  context_.queued = &services_.stats.GetGauge(
      "tandem_kv_server_queued_requests",
      "Requests this server received and its shard threads have not yet taken up.");
  context_.open_rounds = &services_.stats.GetGauge(
      "tandem_kv_server_open_rounds",
      "dist_sync rounds (one per key slice) that some workers pushed to and others not yet.");
  for (int i = 0; i < options.threads; ++i) {
    shards_.push_back(std::make_unique<ServerShard>(context_, i));
  }
  services_.dispatcher.Register(kvmsg::kFirst, kvmsg::kLast, this);
}

KvServer::~KvServer() {
  Stop();
  shards_.clear();
}

void KvServer::Stop() {
  {
    // A shard parked at a rendezvous that will never complete must not
    // block its own stop.
    std::lock_guard lock(checkpoint_mu_);
    for (auto& weak : rendezvous_) {
      if (auto r = weak.lock()) r->Cancel();
    }
  }
  for (auto& shard : shards_) shard->Stop();
}

void KvServer::Start() {
  context_.self_id = services_.membership.self().id;
  context_.num_workers = services_.membership.table().num_workers;
  services_.log.V1("parameter server up: {} shard threads, {} workers", shards_.size(),
                   context_.num_workers);
  // Elastic jobs (docs/elastic.md): every shard learns of a worker that left,
  // in its queue's order, so that a push queued before the news still counts.
  auto depart = [this](int rank) {
    for (auto& shard : shards_) {
      ShardItem item;
      item.departed_worker = rank;
      shard->Post(std::move(item));
    }
  };
  services_.membership.AddWorkerLeftListener(
      [depart](const cluster::WorkerLeftNotice& notice) { depart(notice.node.rank); });
  // One that left before the listener was added (Depart is idempotent).
  const std::vector<int> members = services_.membership.workers();
  for (int rank = 0; rank < context_.num_workers; ++rank) {
    if (std::find(members.begin(), members.end(), rank) == members.end()) depart(rank);
  }
  for (auto& s : shards_) s->Start();
}

std::span<std::byte> KvServer::PayloadDestination(net::ConnectionId id, const net::Header& h,
                                                  const std::string&) {
  const bool carries_value =
      h.type == kvmsg::kInit || h.type == kvmsg::kPush || h.type == kvmsg::kPushPull;
  if (!carries_value || (h.flags & net::flags::kResponse) || h.payload_length == 0) return {};
  ByteBuffer& b = receiving_[id];
  b = pool_.Take(static_cast<size_t>(h.payload_length));
  return b.span();
}

void KvServer::OnDisconnected(net::ConnectionId id, const std::string&) {
  receiving_.erase(id);
  window_.Forget(id);
}

void KvServer::OnMessage(net::ConnectionId id, net::Message&& msg) {
  if (auto it = receiving_.find(id); it != receiving_.end()) {
    // The payload landed in a pool buffer: the request owns it from here.
    if (msg.payload.in_posted_buffer() && msg.payload.bytes.data() == it->second.data.get()) {
      msg.payload.owned = std::move(it->second.data);
    }
    receiving_.erase(it);
  }
  const net::Header& h = msg.header;
  if (h.flags & net::flags::kResponse) {
    services_.log.Warn("dropped a {} response from node {}: a server sends no requests",
                       KvMessageName(h.type), h.sender);
    return;
  }
  if (h.type > kvmsg::kLastDefined) {
    Reject(id, h, ErrorKind::kProtocol,
           fmt::format("{} is not a request this server knows", KvMessageName(h.type)));
    return;
  }
  if (h.type == kvmsg::kCheckpoint) {
    StartCheckpoint(id, std::move(msg));
    return;
  }
  if (h.type == kvmsg::kCheckpointOutcome || h.type == kvmsg::kCheckpointQuery) {
    HandleOutcome(id, msg);
    return;
  }
  ShardItem item;
  item.connection = id;
  size_t shard = 0;
  if (h.type <= kvmsg::kRowSparsePull) {
    try {
      item.request = KeyRequest::Decode(msg.meta);
    } catch (const ProtocolError& e) {
      Reject(id, h, ErrorKind::kProtocol, e.what());
      return;
    }
    shard = static_cast<size_t>(item.request->key % shards_.size());
  }
  // Booked until the shard answers it (ServerShard::Send releases it).
  const uint64_t bytes = net::kHeaderSize + msg.meta.size() + msg.payload.bytes.size();
  if (std::string why = window_.Admit(id, h.request_id, bytes); !why.empty()) {
    Reject(id, h, ErrorKind::kProtocol, why);
    return;
  }
  item.msg = std::move(msg);
  shards_[shard]->Post(std::move(item));
}

void KvServer::Reject(net::ConnectionId id, const net::Header& h, ErrorKind kind,
                      const std::string& text) {
  services_.log.Warn("rejected {} from node {}: {}", KvMessageName(h.type), h.sender, text);
  net::OutgoingMessage m;
  m.header = ResponseHeader(h, context_.self_id, net::flags::kError);
  m.meta = ErrorReply{kind, text}.Encode();
  services_.transport.Send(id, std::move(m));
}

void KvServer::Reply(net::ConnectionId id, const net::Header& h, std::string payload) {
  net::OutgoingMessage m;
  m.header = ResponseHeader(h, context_.self_id);
  if (!payload.empty()) {
    m.owned_storage.resize(payload.size());
    std::memcpy(m.owned_storage.data(), payload.data(), payload.size());
    m.payload.push_back(std::span<const std::byte>(m.owned_storage));
  }
  try {
    services_.transport.Send(id, std::move(m));
  } catch (const std::exception& e) {
    services_.log.Warn("{} reply to node {} failed: {}", KvMessageName(h.type), h.sender, e.what());
  }
}

void KvServer::HandleOutcome(net::ConnectionId id, const net::Message& msg) {
  const net::Header& h = msg.header;
  if (h.type == kvmsg::kCheckpointOutcome) {
    try {
      CheckpointOutcome o = CheckpointOutcome::Decode(msg.meta);
      std::lock_guard lock(checkpoint_mu_);
      outcome_ = std::move(o);
    } catch (const ProtocolError& e) {
      Reject(id, h, ErrorKind::kProtocol, e.what());
      return;
    }
    Reply(id, h, {});
    return;
  }
  std::optional<CheckpointOutcome> o;
  {
    std::lock_guard lock(checkpoint_mu_);
    o = outcome_;
  }
  if (!o) {
    Reject(id, h, ErrorKind::kOther,
           "worker 0 reported no checkpoint outcome to this server (it failed before it could)");
    return;
  }
  if (!o->error.empty()) {
    Reject(id, h, ErrorKind::kOther, fmt::format("worker 0 failed: {}", o->error));
    return;
  }
  // docs/checkpoints.md, "Messages": u8 found, 7 zero bytes, u64 round.
  base::ByteWriter w;
  w.Put(static_cast<uint8_t>(o->found ? 1 : 0));
  for (int i = 0; i < 7; ++i) w.Put(uint8_t{0});
  w.Put(o->round);
  Reply(id, h, w.Take());
}

void KvServer::StartCheckpoint(net::ConnectionId id, net::Message&& msg) {
  const net::Header h = msg.header;
  CheckpointCommand cmd;
  try {
    cmd = CheckpointCommand::Decode(msg.meta);
  } catch (const ProtocolError& e) {
    Reject(id, h, ErrorKind::kProtocol, e.what());
    return;
  }
  auto rendezvous = std::make_shared<ShardRendezvous>(shards_.size(), [this, id, h, cmd] {
    try {
      RunCheckpoint(cmd);
    } catch (const InvalidArgument& e) {
      Reject(id, h, ErrorKind::kInvalidArgument, e.what());
      return;
    } catch (const std::exception& e) {
      Reject(id, h, ErrorKind::kOther, e.what());
      return;
    }
    Reply(id, h, {});
  });
  {
    std::lock_guard lock(checkpoint_mu_);
    std::erase_if(rendezvous_, [](const auto& weak) { return weak.expired(); });
    rendezvous_.push_back(rendezvous);
  }
  for (auto& shard : shards_) {
    ShardItem item;
    item.connection = id;
    item.rendezvous = rendezvous;
    shard->Post(std::move(item));
  }
}

void KvServer::RunCheckpoint(const CheckpointCommand& cmd) {
  switch (cmd.phase) {
    case CheckpointCommand::Phase::kSave:
      SaveShard(cmd);
      return;
    case CheckpointCommand::Phase::kStage:
      StageShard(cmd);
      return;
    case CheckpointCommand::Phase::kCommit:
      CommitShard(cmd);
      return;
    case CheckpointCommand::Phase::kDiscard: {
      std::lock_guard lock(checkpoint_mu_);
      staged_.reset();
      return;
    }
  }
}

void KvServer::SaveShard(const CheckpointCommand& cmd) {
  const NodeInfo& self = services_.membership.self();
  ServerCheckpoint c;
  c.header.round = cmd.round;
  c.header.rank = static_cast<uint32_t>(self.rank);
  c.header.ranks = static_cast<uint32_t>(services_.membership.table().num_servers);
  if (auto snapshot = optimizer_.Snapshot()) {
    c.optimizer_name = std::move(snapshot->first);
    c.optimizer_states = std::move(snapshot->second);
  }
  for (const auto& shard : shards_) shard->ExportKeys(&c.keys);
  std::sort(c.keys.begin(), c.keys.end(),
            [](const SavedKey& a, const SavedKey& b) { return a.key < b.key; });
  const std::string path =
      CheckpointRoundDir(cmd.dir, cmd.round) + "/" + ServerCheckpointName(c.header.rank);
  WriteFileDurably(path, EncodeServerCheckpoint(c));
  services_.log.V1("checkpoint: wrote round {} ({} key slices) to {}", cmd.round, c.keys.size(),
                   path);
}

void KvServer::StageShard(const CheckpointCommand& cmd) {
  const NodeInfo& self = services_.membership.self();
  const auto num_servers = static_cast<uint32_t>(services_.membership.table().num_servers);
  const auto rank = static_cast<uint32_t>(self.rank);
  const std::string path =
      CheckpointRoundDir(cmd.dir, cmd.round) + "/" + ServerCheckpointName(rank);
  Staged staged;
  staged.dir = cmd.dir;
  staged.round = cmd.round;
  staged.content = DecodeServerCheckpoint(ReadCheckpointFile(path), path);
  const CheckpointHeader& fh = staged.content.header;
  if (fh.ranks != num_servers) {
    throw InvalidArgument(fmt::format(
        "checkpoint file {}: written by a job of {} servers, this job has {}: a checkpoint loads "
        "only into as many servers as saved it",
        path, fh.ranks, num_servers));
  }
  if (fh.rank != rank || fh.round != cmd.round) {
    throw InvalidArgument(
        fmt::format("checkpoint file {}: header says round {} server {}, "
                    "expected round {} server {}",
                    path, fh.round, fh.rank, cmd.round, rank));
  }
  std::map<uint64_t, const SavedKey*> saved;
  for (const SavedKey& k : staged.content.keys) saved[k.key] = &k;
  std::set<uint64_t> matched;
  for (const auto& shard : shards_) shard->CheckRestorable(saved, &matched);
  for (const auto& [key, k] : saved) {
    if (!matched.contains(key)) {
      throw InvalidArgument(fmt::format(
          "checkpoint file {}: holds key {}, which this server does not: Init every key before "
          "LoadCheckpoint",
          path, key));
    }
  }
  if (staged.content.optimizer_name) {
    try {
      staged.optimizer =
          optimizer_.LoadedCopy(*staged.content.optimizer_name, staged.content.optimizer_states);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("checkpoint file {}: {}", path, e.what()));
    }
  } else if (optimizer_.active()) {
    throw InvalidArgument(fmt::format(
        "checkpoint file {}: holds no optimizer states, but this server runs an optimizer", path));
  }
  std::lock_guard lock(checkpoint_mu_);
  staged_ = std::move(staged);
}

void KvServer::CommitShard(const CheckpointCommand& cmd) {
  std::lock_guard lock(checkpoint_mu_);
  if (!staged_ || staged_->round != cmd.round || staged_->dir != cmd.dir) {
    throw InvalidArgument(fmt::format(
        "commit of checkpoint round {} of {}: this server staged {}", cmd.round, cmd.dir,
        staged_ ? fmt::format("round {} of {}", staged_->round, staged_->dir) : "nothing"));
  }
  std::map<uint64_t, const SavedKey*> saved;
  for (const SavedKey& k : staged_->content.keys) saved[k.key] = &k;
  for (const auto& shard : shards_) shard->RestoreKeys(saved);
  if (staged_->optimizer) optimizer_.Replace(std::move(staged_->optimizer));
  services_.log.V1("checkpoint: loaded round {} ({} key slices) from {}", cmd.round, saved.size(),
                   cmd.dir);
  staged_.reset();
}

}  // namespace tandem::kv
