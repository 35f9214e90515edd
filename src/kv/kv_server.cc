// The parameter server's routing (docs/kvstore.md, "Server").
#include "kv/kv_server.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

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
  o.inflight_bytes = static_cast<uint64_t>(
      env.GetInt("TANDEM_KV_INFLIGHT_BYTES", static_cast<int64_t>(o.inflight_bytes), 1));
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
  context_.queued = &services_.stats.GetGauge(
      "tandem_kv_server_queued_requests",
      "Requests this server received and its shard threads have not yet taken up.");
  for (int i = 0; i < options.threads; ++i) {
    shards_.push_back(std::make_unique<ServerShard>(context_, i));
  }
  services_.dispatcher.Register(kvmsg::kFirst, kvmsg::kLast, this);
}

KvServer::~KvServer() { shards_.clear(); }

void KvServer::Start() {
  context_.self_id = services_.membership.self().id;
  context_.num_workers = services_.membership.table().num_workers;
  services_.log.V1("parameter server up: {} shard threads, {} workers", shards_.size(),
                   context_.num_workers);
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
  m.header.type = h.type;
  m.header.flags = net::flags::kResponse | net::flags::kError;
  m.header.sender = context_.self_id;
  m.header.recipient = h.sender;
  m.header.request_id = h.request_id;
  m.meta = ErrorReply{kind, text}.Encode();
  services_.transport.Send(id, std::move(m));
}

}  // namespace tandem::kv
