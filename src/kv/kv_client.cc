// A worker's requests to the servers (docs/protocol-ps.md).
#include "kv/kv_client.h"

#include <fmt/format.h>

#include <set>

#include "kv/kv_messages.h"
#include "tandem/error.h"

namespace tandem::kv {

KvClient::Options KvClient::Options::FromEnvironment(const base::Environment& env) {
  Options o;
  o.inflight_bytes = static_cast<uint64_t>(env.GetInt("TANDEM_KV_INFLIGHT_BYTES",
                                                      static_cast<int64_t>(o.inflight_bytes),
                                                      static_cast<int64_t>(kMinInflightBytes)));
  o.timeout = env.GetSeconds("TANDEM_KV_TIMEOUT", o.timeout);
  return o;
}

namespace {

// "row-sparse pull" -> "row_sparse_pull": a label value in Prometheus' style.
std::string OpLabel(uint16_t type) {
  std::string s = KvMessageName(type);
  for (char& c : s) {
    if (c == ' ' || c == '-') c = '_';
  }
  return s;
}

}  // namespace

KvClient::KvClient(const cluster::NodeServices& services, Options options)
    : services_(services),
      options_(options),
      latency_(services.stats, "tandem_kv_request_duration_seconds",
               "Seconds from a worker's request to a server until its reply, by operation.",
               services.timeline),
      outstanding_(services.stats.GetGauge(
          "tandem_kv_requests_outstanding",
          "Requests of this worker queued for or awaiting a server's reply.")),
      window_bytes_(services.stats.GetGauge(
          "tandem_kv_window_bytes",
          "Bytes this worker's windows count toward the servers, all servers together "
          "(TANDEM_KV_INFLIGHT_BYTES bounds each).")) {
  services_.dispatcher.Register(kvmsg::kFirst, kvmsg::kLast, this);
  services_.membership.AddFailureListener(
      [this](const std::string&, const std::exception_ptr& error) { FailAll(error); });
}

KvClient::~KvClient() = default;

void KvClient::Start() {
  const auto& table = services_.membership.table();
  rank_ = services_.membership.self().rank;
  self_id_ = services_.membership.self().id;
  std::vector<ServerState> servers(static_cast<size_t>(table.num_servers));
  for (const NodeInfo& n : table.nodes) {
    if (n.role != Role::kServer) continue;
    ServerState& s = servers.at(static_cast<size_t>(n.rank));
    s.name = n.ToString();
    s.node_id = n.id;
  }
  for (const NodeInfo& n : table.nodes) {
    if (n.role != Role::kServer) continue;
    net::ConnectionId c =
        services_.transport.Connect({n.host, n.port}, services_.config.connect_timeout);
    servers[static_cast<size_t>(n.rank)].connection = c;
    std::lock_guard lock(mu_);
    server_of_connection_[c] = n.rank;
  }
  std::lock_guard lock(mu_);
  servers_ = std::move(servers);
  services_.log.V1("connected to {} servers", servers_.size());
}

std::exception_ptr KvClient::RootCause() const {
  // A node notices a lost peer at its next heartbeat check, and the peer's
  // last heartbeat reached the nodes up to an interval apart: two intervals
  // bound how much later than the peer that left this node learns why.
  return services_.membership.AwaitFailure(2 * services_.config.heartbeat_interval +
                                           std::chrono::milliseconds(250));
}

void KvClient::Submit(const std::shared_ptr<KvOperation>& op, std::vector<ClientRequest> requests) {
  op->SetLogger(&services_.log, services_.config.wait_report_interval);
  op->SetRootCause([this] { return RootCause(); });
  if (requests.empty()) {  // nothing to ask: done at once
    op->Expect(-1, 1);
    op->Event(-1);
    return;
  }
  std::vector<std::pair<int, std::vector<net::OutgoingMessage>>> to_send;
  std::optional<std::string> lost;  // a needed server that is gone
  {
    std::unique_lock lock(mu_);
    if (failure_) std::rethrow_exception(failure_);
    for (const auto& r : requests) {
      const ServerState& s = servers_.at(static_cast<size_t>(r.server));
      if (s.lost && !lost) lost = s.lost;
    }
    if (lost) {
      lock.unlock();  // the job's failure reaches FailAll, which takes mu_
      if (std::exception_ptr root = RootCause()) std::rethrow_exception(root);
      throw PeerLost(*lost);
    }
    std::vector<int> touched;
    for (auto& r : requests) {
      const int server = r.server;
      op->Expect(server, r.payload.empty() ? 1 : 2);
      uint64_t id = next_request_++;
      Pending p;
      p.op = op;
      p.seq = next_seq_++;
      p.request_id = id;
      p.submitted = services_.clock.Now();
      // At least what the server books for it (request_window.h), and the
      // reply's destination.
      for (auto s : r.payload) p.wire_bytes += s.size();
      p.wire_bytes += net::kHeaderSize + r.meta.size();
      p.bytes = p.wire_bytes + r.destination.size();
      ServerState& s = servers_[static_cast<size_t>(server)];
      auto& fifo = s.by_key[r.key];
      fifo.push_back(id);
      if (fifo.size() == 1) s.ready.emplace(r.priority, -static_cast<int64_t>(p.seq), id);
      p.request = std::move(r);
      pending_.emplace(id, std::move(p));
      touched.push_back(server);
    }
    outstanding_.Set(static_cast<double>(pending_.size()));
    for (int server : touched) {
      auto msgs = TakeSendable(server);
      if (!msgs.empty()) to_send.emplace_back(server, std::move(msgs));
    }
  }
  for (auto& [server, msgs] : to_send) SendAll(std::move(msgs), server);
}

void KvClient::AddInflight(ServerState& s, int64_t delta) {
  s.inflight = static_cast<uint64_t>(static_cast<int64_t>(s.inflight) + delta);
  window_total_ = static_cast<uint64_t>(static_cast<int64_t>(window_total_) + delta);
  window_bytes_.Set(static_cast<double>(window_total_));
}

std::vector<net::OutgoingMessage> KvClient::TakeSendable(int server) {
  std::vector<net::OutgoingMessage> out;
  ServerState& s = servers_[static_cast<size_t>(server)];
  while (!s.ready.empty() && (s.inflight == 0 || s.inflight < options_.inflight_bytes)) {
    uint64_t id = std::get<2>(s.ready.top());
    s.ready.pop();
    Pending& p = pending_.at(id);
    // The key's next request becomes eligible: it follows on the same
    // connection, so the server still sees the issue order.
    auto& fifo = s.by_key[p.request.key];
    fifo.pop_front();
    if (fifo.empty()) {
      s.by_key.erase(p.request.key);
    } else {
      const Pending& next = pending_.at(fifo.front());
      s.ready.emplace(next.request.priority, -static_cast<int64_t>(next.seq), fifo.front());
    }
    p.sent = true;
    p.counted = p.bytes;
    AddInflight(s, static_cast<int64_t>(p.counted));
    net::OutgoingMessage m;
    m.header.type = p.request.type;
    m.header.sender = self_id_;
    m.header.recipient = s.node_id;
    m.header.request_id = id;
    m.meta = std::move(p.request.meta);
    m.payload = std::move(p.request.payload);
    p.request.payload.clear();
    if (!m.payload.empty()) {
      m.on_sent = [op = p.op, server](std::exception_ptr e) { op->Event(server, e); };
    }
    out.push_back(std::move(m));
  }
  return out;
}

void KvClient::SendAll(std::vector<net::OutgoingMessage> msgs, int server) {
  net::ConnectionId c = servers_[static_cast<size_t>(server)].connection;
  for (auto& m : msgs) {
    uint64_t id = m.header.request_id;
    bool borrowed = !m.payload.empty();
    try {
      services_.transport.Send(c, std::move(m));
    } catch (const std::exception&) {
      // Send failed before taking the message: neither event will come.
      if (borrowed) {
        std::shared_ptr<KvOperation> op;
        {
          std::lock_guard lock(mu_);
          auto it = pending_.find(id);
          if (it != pending_.end()) op = it->second.op;
        }
        if (op) op->Event(server, std::current_exception());
      }
      Finish(id, std::current_exception());
    }
  }
}

std::span<std::byte> KvClient::PayloadDestination(net::ConnectionId, const net::Header& h,
                                                  const std::string&) {
  if ((h.flags & net::flags::kResponse) == 0 || (h.flags & net::flags::kError) != 0 ||
      h.type == kvmsg::kReceipt) {
    return {};
  }
  std::lock_guard lock(mu_);
  auto it = pending_.find(h.request_id);
  if (it == pending_.end()) return {};
  Pending& p = it->second;
  if (p.request.destination.size() != h.payload_length || p.request.destination.empty()) return {};
  p.receiving = true;
  return p.request.destination;
}

void KvClient::OnMessage(net::ConnectionId id, net::Message&& msg) {
  const net::Header& h = msg.header;
  if ((h.flags & net::flags::kResponse) == 0) {
    services_.log.Warn("dropped {} from node {}: a worker serves no requests",
                       KvMessageName(h.type), h.sender);
    return;
  }
  if (h.type == kvmsg::kReceipt) {
    OnReceipt(msg);
    return;
  }
  std::span<std::byte> destination;
  std::string what;
  int server = -1;
  {
    std::lock_guard lock(mu_);
    auto it = pending_.find(h.request_id);
    if (it == pending_.end()) {
      services_.log.V1("late {} reply {} on connection {} (its call already failed)",
                       KvMessageName(h.type), h.request_id, id);
      return;
    }
    destination = it->second.request.destination;
    server = it->second.request.server;
    what = fmt::format("{} on server {}", it->second.op->what(), server);
  }
  std::exception_ptr error;
  if (h.flags & net::flags::kError) {
    try {
      ErrorReply::Decode(msg.meta).Throw(what);
    } catch (...) {
      error = std::current_exception();
    }
  } else if (msg.payload.bytes.size() != destination.size()) {
    error = std::make_exception_ptr(
        ProtocolError(fmt::format("{}: the reply carries {} bytes, expected {}", what,
                                  msg.payload.bytes.size(), destination.size())));
  } else if (!destination.empty() && !msg.payload.in_posted_buffer()) {
    std::memcpy(destination.data(), msg.payload.bytes.data(), destination.size());
  }
  Finish(h.request_id, error);
}

void KvClient::OnReceipt(const net::Message& msg) {
  Receipt receipt;
  try {
    receipt = Receipt::Decode(msg.meta);
  } catch (const ProtocolError&) {
    // The request's answer is still due; failing it here would free its
    // memory while the server may still send into it.
    services_.log.Warn("dropped an undecodable receipt from node {} for request {}",
                       msg.header.sender, msg.header.request_id);
    return;
  }
  std::vector<net::OutgoingMessage> next;
  int server = -1;
  {
    std::lock_guard lock(mu_);
    auto it = pending_.find(msg.header.request_id);
    if (it == pending_.end() || !it->second.sent) return;  // its call already ended
    Pending& p = it->second;
    server = p.request.server;
    const uint64_t held = receipt.state == Receipt::State::kMerged ? 0 : p.wire_bytes;
    if (held >= p.counted) return;
    ServerState& s = servers_[static_cast<size_t>(server)];
    AddInflight(s, -static_cast<int64_t>(p.counted - held));
    p.counted = held;
    if (!s.lost && !failure_) next = TakeSendable(server);
  }
  if (!next.empty()) SendAll(std::move(next), server);
}

void KvClient::Finish(uint64_t request_id, std::exception_ptr error) {
  std::shared_ptr<KvOperation> op;
  int server = -1;
  uint16_t type = 0;
  uint64_t key = 0;
  uint64_t bytes = 0;
  base::SteadyTime submitted;
  std::vector<net::OutgoingMessage> next;
  {
    std::lock_guard lock(mu_);
    auto it = pending_.find(request_id);
    if (it == pending_.end()) return;
    op = std::move(it->second.op);
    server = it->second.request.server;
    type = it->second.request.type;
    key = it->second.request.key;
    bytes = it->second.bytes;
    submitted = it->second.submitted;
    ServerState& s = servers_[static_cast<size_t>(server)];
    AddInflight(s, -static_cast<int64_t>(it->second.counted));
    pending_.erase(it);
    outstanding_.Set(static_cast<double>(pending_.size()));
    if (!s.lost && !failure_) next = TakeSendable(server);
  }
  if (!error) {
    std::map<std::string, std::string> args;
    if (latency_.tracing()) {
      args = {{"server", std::to_string(server)},
              {"key", std::to_string(key)},
              {"bytes", std::to_string(bytes)}};
    }
    latency_.Record(OpLabel(type), submitted, services_.clock.Now(), args);
  }
  op->Event(server, error);
  if (!next.empty()) SendAll(std::move(next), server);
}

void KvClient::OnDisconnected(net::ConnectionId id, const std::string& reason) {
  int server = -1;
  {
    std::lock_guard lock(mu_);
    auto it = server_of_connection_.find(id);
    if (it == server_of_connection_.end()) return;
    server = it->second;
  }
  FailServer(server,
             fmt::format("lost {}: {}", servers_[static_cast<size_t>(server)].name, reason));
}

void KvClient::FailServer(int server, const std::string& text) {
  std::vector<std::pair<std::shared_ptr<KvOperation>, bool>> failed;  // op, unsent with payload
  {
    std::lock_guard lock(mu_);
    ServerState& s = servers_[static_cast<size_t>(server)];
    if (!s.lost) s.lost = text;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.request.server != server) {
        ++it;
        continue;
      }
      failed.emplace_back(it->second.op, !it->second.sent && !it->second.request.payload.empty());
      it = pending_.erase(it);
    }
    s.by_key.clear();
    s.ready = {};
    outstanding_.Set(static_cast<double>(pending_.size()));
  }
  auto error = std::make_exception_ptr(PeerLost(text));
  for (auto& [op, unsent] : failed) {
    if (unsent) op->Event(server, error);
    op->Event(server, error);
  }
}

void KvClient::FailAll(const std::exception_ptr& error) {
  // Runs under Membership's lock: quick, and no call back into it.
  std::vector<std::tuple<std::shared_ptr<KvOperation>, int, bool>> failed;
  std::set<net::ConnectionId> to_close;
  {
    std::lock_guard lock(mu_);
    if (!failure_) failure_ = error;
    for (auto it = pending_.begin(); it != pending_.end();) {
      // The transport may still hold the caller's memory of a sent request:
      // its payload not yet all written (the on_sent event is still to
      // come) or its reply being written into the destination. Neither may
      // be waited for (a lost server, a cut link: the rest never moves), so
      // the connection is closed: the transport drops the payload (on_sent
      // runs with an error) and stops receiving, and OnDisconnected fails a
      // reply being received.
      if (it->second.sent) {
        to_close.insert(servers_[static_cast<size_t>(it->second.request.server)].connection);
      }
      if (it->second.receiving) {
        ++it;
        continue;
      }
      failed.emplace_back(it->second.op, it->second.request.server,
                          !it->second.sent && !it->second.request.payload.empty());
      it = pending_.erase(it);
    }
    for (auto& s : servers_) {
      s.by_key.clear();
      s.ready = {};
    }
    outstanding_.Set(static_cast<double>(pending_.size()));
  }
  // Close only posts the closing to the transport's thread (no callback runs
  // from here), so it is safe under Membership's lock.
  for (net::ConnectionId c : to_close) services_.transport.Close(c);
  for (auto& [op, server, unsent] : failed) {
    if (unsent) op->Event(server, error);
    op->Event(server, error);
  }
}

}  // namespace tandem::kv
