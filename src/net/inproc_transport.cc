#include "net/inproc_transport.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "tandem/error.h"

namespace tandem::net {
namespace {

// Retry pauses of Connect(): short, since everything is in one process.
constexpr std::chrono::milliseconds kInitialBackoff{5};
constexpr std::chrono::milliseconds kMaxBackoff{100};
// First port handed out for port 0 on a host.
constexpr uint16_t kFirstAutoPort = 40000;

std::string AuthFailureText(const std::string& remote) {
  return fmt::format(
      "connection to {} closed during authentication (wrong TANDEM_SECRET or job id?)", remote);
}

}  // namespace

// --- InProcNetwork ---------------------------------------------------------

bool InProcNetwork::PostTo(uint64_t to, std::function<void(InProcTransport&)> fn) {
  std::lock_guard lock(mu_);
  auto it = transports_.find(to);
  if (it == transports_.end()) return false;
  InProcTransport* t = it->second;
  // Detach() takes mu_ before the transport stops its loop, and the loop runs
  // every task posted before it stops, so `t` outlives the task.
  return t->loop_->Post([t, fn = std::move(fn)] { fn(*t); });
}

void InProcNetwork::SettleSend(uint64_t owner, std::function<void(std::exception_ptr)> on_sent,
                               std::exception_ptr error) {
  std::lock_guard lock(mu_);
  auto it = transports_.find(owner);
  if (it == transports_.end()) return;
  InProcTransport* t = it->second;
  // The owner stays attached (and its loop running) until every message it
  // counted is settled, so both the post and the count reach it.
  if (on_sent) {
    t->loop_->Post([t, on_sent = std::move(on_sent), error] {
      InProcTransport::RunOnSent(on_sent, error, t->logger_);
    });
  }
  t->OnSendSettled();
}

uint64_t InProcNetwork::Attach(InProcTransport* t) {
  std::lock_guard lock(mu_);
  uint64_t number = next_number_++;
  transports_.emplace(number, t);
  return number;
}

void InProcNetwork::Unbind(uint64_t number) {
  std::lock_guard lock(mu_);
  std::erase_if(listeners_, [number](const auto& kv) { return kv.second == number; });
}

void InProcNetwork::Detach(uint64_t number) {
  std::lock_guard lock(mu_);
  transports_.erase(number);
  std::erase_if(listeners_, [number](const auto& kv) { return kv.second == number; });
}

Endpoint InProcNetwork::Bind(const Endpoint& local, uint64_t number) {
  std::lock_guard lock(mu_);
  Endpoint bound = local;
  if (bound.port == 0) {
    uint16_t& next = next_port_.try_emplace(local.host, kFirstAutoPort).first->second;
    for (int tries = 0; tries < 65536; ++tries) {
      Endpoint candidate{local.host, next};
      next = next == 65535 ? kFirstAutoPort : static_cast<uint16_t>(next + 1);
      if (!listeners_.contains(candidate.ToString())) {
        bound = candidate;
        break;
      }
    }
    if (bound.port == 0) {
      throw IoError(fmt::format("cannot listen on {}: no free in-process port", local.ToString()));
    }
  }
  auto [it, inserted] = listeners_.emplace(bound.ToString(), number);
  if (!inserted) {
    throw IoError(
        fmt::format("cannot listen on {}: address already in use (in-process)", bound.ToString()));
  }
  return bound;
}

uint64_t InProcNetwork::Lookup(const Endpoint& remote) {
  std::lock_guard lock(mu_);
  auto it = listeners_.find(remote.ToString());
  return it == listeners_.end() ? 0 : it->second;
}

// --- InProcTransport -------------------------------------------------------

InProcTransport::InProcTransport(InProcNetwork& network, TransportOptions options,
                                 TransportHandler* handler, base::Logger& logger)
    : network_(network), options_(std::move(options)), handler_(handler), logger_(logger) {
  if (handler_ == nullptr) throw InvalidArgument("InProcTransport needs a TransportHandler");
  loop_ = std::make_unique<EventLoop>("tandem-inproc");
  number_ = network_.Attach(this);
  name_ = fmt::format("inproc-{}", number_);
}

InProcTransport::~InProcTransport() { Shutdown(); }

Endpoint InProcTransport::Listen(const Endpoint& local) {
  {
    std::lock_guard lock(mu_);
    if (shutting_down_) {
      throw Error(fmt::format("cannot listen on {}: the transport is shut down", local.ToString()));
    }
  }
  Endpoint bound = network_.Bind(local, number_);
  logger_.V1("listening on {} (in-process)", bound.ToString());
  return bound;
}

bool InProcTransport::SleepUnlessShutdown(std::chrono::steady_clock::duration d) {
  std::unique_lock lock(mu_);
  return !shutdown_cv_.wait_for(lock, d, [this] { return shutting_down_; });
}

ConnectionId InProcTransport::Connect(const Endpoint& remote, std::chrono::milliseconds timeout) {
  if (loop_->IsLoopThread()) {
    throw InvalidArgument(fmt::format(
        "Connect({}) called from a transport callback; it blocks and must run elsewhere",
        remote.ToString()));
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::chrono::steady_clock::duration backoff = kInitialBackoff;
  int attempts = 0;
  for (;;) {
    ++attempts;
    uint64_t server = network_.Lookup(remote);
    if (server != 0) {
      auto done = std::make_shared<std::promise<DeferredError>>();
      auto future = done->get_future();
      ConnectionId id;
      {
        std::lock_guard lock(mu_);
        if (shutting_down_) break;
        id = next_id_++;
        Connection c;
        c.peer = PeerInfo{remote, false};
        c.peer_name = remote.ToString();
        c.peer_transport = server;
        c.connect_done = done;
        connections_.emplace(id, std::move(c));
      }
      Endpoint me{name_, static_cast<uint16_t>(id & 0xffff)};
      bool posted = network_.PostTo(
          server, [client = number_, id, job = options_.job_id, secret = options_.secret, me,
                   server_name = remote.ToString()](InProcTransport& s) {
            s.Accept(client, id, job, secret, me, server_name);
          });
      if (!posted) {
        // The listener went away between Lookup and PostTo: like a refusal.
        std::lock_guard lock(mu_);
        connections_.erase(id);
      } else {
        future.get().ThrowIfSet();  // AuthFailed, or Error on shutdown
        return id;
      }
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      throw Timeout(
          fmt::format("connecting to {} timed out after {} ms ({} attempts); last "
                      "error: no in-process listener at {}",
                      remote.ToString(), timeout.count(), attempts, remote.ToString()));
    }
    if (!SleepUnlessShutdown(std::min(backoff, deadline - now))) break;
    backoff = std::min<std::chrono::steady_clock::duration>(backoff * 2, kMaxBackoff);
  }
  throw Error(fmt::format("the transport shut down while connecting to {}", remote.ToString()));
}

void InProcTransport::Accept(uint64_t client, ConnectionId client_id, const std::string& job_id,
                             const std::string& secret, const Endpoint& client_address,
                             const std::string& server_name) {
  std::string refusal;
  if (closed_everything_) {
    refusal = fmt::format("{} shut down", server_name);
  } else if (job_id != options_.job_id) {
    refusal = fmt::format("job id '{}' differs from ours", job_id);
  } else if (secret != options_.secret) {
    refusal = "the client's proof does not match our secret";
  }
  if (!refusal.empty()) {
    if (!closed_everything_) {
      logger_.Warn("dropped connection from {}: authentication failed: {}",
                   client_address.ToString(), refusal);
    }
    DeferredError error = DeferredError::From(
        closed_everything_ ? std::make_exception_ptr(PeerLost(refusal))
                           : std::make_exception_ptr(AuthFailed(AuthFailureText(server_name))));
    network_.PostTo(client,
                    [client_id, error](InProcTransport& c) { c.FailConnect(client_id, error); });
    return;
  }
  ConnectionId id;
  PeerInfo peer{client_address, true};
  {
    std::lock_guard lock(mu_);
    id = next_id_++;
    Connection c;
    c.peer = peer;
    c.peer_name = client_address.ToString();
    c.peer_transport = client;
    c.peer_id = client_id;
    c.established = true;
    connections_.emplace(id, std::move(c));
  }
  // Posted before our OnConnected runs, so the client's OnConnected precedes
  // any message our handler sends from it.
  bool posted = network_.PostTo(client, [client_id, server = number_, id](InProcTransport& c) {
    c.CompleteConnect(client_id, server, id);
  });
  if (!posted) {
    std::lock_guard lock(mu_);
    connections_.erase(id);
    return;
  }
  logger_.V1("accepted connection {} from {} (in-process)", id, client_address.ToString());
  try {
    handler_->OnConnected(id, peer);
  } catch (const std::exception& e) {
    logger_.Error("OnConnected for connection {} with {} threw: {}", id, client_address.ToString(),
                  e.what());
  }
}

void InProcTransport::CompleteConnect(ConnectionId id, uint64_t server, ConnectionId server_id) {
  std::shared_ptr<std::promise<DeferredError>> done;
  PeerInfo peer;
  {
    std::lock_guard lock(mu_);
    auto it = connections_.find(id);
    if (it == connections_.end() || it->second.closed) {
      // We shut down meanwhile (the waiter knows); the server must learn it.
      network_.PostTo(server, [server_id](InProcTransport& s) {
        s.OnPeerClosed(server_id, PeerNotice::kShutDown);
      });
      return;
    }
    it->second.peer_transport = server;
    it->second.peer_id = server_id;
    it->second.established = true;
    done = std::move(it->second.connect_done);
    peer = it->second.peer;
  }
  logger_.V1("connected to {} (connection {}, in-process)", peer.address.ToString(), id);
  try {
    handler_->OnConnected(id, peer);
  } catch (const std::exception& e) {
    logger_.Error("OnConnected for connection {} with {} threw: {}", id, peer.address.ToString(),
                  e.what());
  }
  if (done) done->set_value(DeferredError());
}

void InProcTransport::FailConnect(ConnectionId id, DeferredError error) {
  std::shared_ptr<std::promise<DeferredError>> done;
  {
    std::lock_guard lock(mu_);
    auto it = connections_.find(id);
    if (it == connections_.end()) return;
    done = std::move(it->second.connect_done);
    connections_.erase(it);
  }
  if (done) done->set_value(std::move(error));
}

void InProcTransport::RunOnSent(const std::function<void(std::exception_ptr)>& on_sent,
                                std::exception_ptr error, base::Logger& logger) {
  try {
    on_sent(error);
  } catch (const std::exception& e) {
    logger.Error("an on_sent callback threw: {}", e.what());
  }
}

void InProcTransport::FailLocally(std::function<void(std::exception_ptr)> on_sent,
                                  std::exception_ptr error) {
  if (!on_sent) return;
  auto run = [this, on_sent, error] { RunOnSent(on_sent, error, logger_); };
  if (!loop_->Post(run)) run();
}

void InProcTransport::OnSendSettled() {
  {
    std::lock_guard lock(sends_mu_);
    --sends_out_;
  }
  sends_cv_.notify_all();
}

void InProcTransport::Send(ConnectionId id, OutgoingMessage msg) {
  if (msg.meta.size() > std::numeric_limits<uint32_t>::max()) {
    throw InvalidArgument(
        fmt::format("message on connection {}: metadata of {} bytes exceeds "
                    "the {} bytes a header can describe",
                    id, msg.meta.size(), std::numeric_limits<uint32_t>::max()));
  }
  msg.header.meta_length = static_cast<uint32_t>(msg.meta.size());
  msg.header.payload_length = 0;
  for (auto s : msg.payload) msg.header.payload_length += s.size();
  uint64_t peer_transport = 0;
  ConnectionId peer_id = 0;
  std::string peer_name;
  {
    std::lock_guard lock(mu_);
    auto it = connections_.find(id);
    if (it != connections_.end() && it->second.established && !it->second.closing) {
      peer_transport = it->second.peer_transport;
      peer_id = it->second.peer_id;
      peer_name = it->second.peer_name;
    }
  }
  if (peer_transport == 0) {
    FailLocally(std::move(msg.on_sent), std::make_exception_ptr(PeerLost(fmt::format(
                                            "connection {} is closed or was never open", id))));
    return;
  }
  if (logger_.verbosity() >= 2) {
    logger_.V2(
        "send to {} (connection {}): type {} flags {:#x} request {} meta {} B payload "
        "{} B in {} spans",
        peer_name, id, msg.header.type, msg.header.flags, msg.header.request_id, msg.meta.size(),
        msg.header.payload_length, msg.payload.size());
  }
  // std::function needs a copyable task; the message travels behind a
  // shared pointer and is delivered exactly once.
  auto shared = std::make_shared<OutgoingMessage>(std::move(msg));
  {
    std::lock_guard lock(sends_mu_);
    ++sends_out_;
  }
  bool posted =
      network_.PostTo(peer_transport, [peer_id, shared, sender = number_](InProcTransport& r) {
        r.Deliver(peer_id, *shared, sender);
      });
  if (!posted) {
    OnSendSettled();
    FailLocally(std::move(shared->on_sent),
                std::make_exception_ptr(PeerLost(fmt::format(
                    "message to {} not sent: the peer's transport shut down", peer_name))));
  }
}

void InProcTransport::Deliver(ConnectionId id, OutgoingMessage& msg, uint64_t sender) {
  std::string peer_name;
  bool open = false;
  {
    std::lock_guard lock(mu_);
    auto it = connections_.find(id);
    if (it != connections_.end() && it->second.established && !it->second.closing) {
      open = true;
      peer_name = it->second.peer_name;
    }
  }
  if (!open) {
    network_.SettleSend(
        sender, std::move(msg.on_sent),
        std::make_exception_ptr(PeerLost("message not delivered: the connection closed")));
    return;
  }
  const Header& h = msg.header;
  std::string violation;
  if (h.meta_length > options_.limits.max_meta_bytes) {
    violation = fmt::format("metadata length {} exceeds limit {}", h.meta_length,
                            options_.limits.max_meta_bytes);
  } else if (h.payload_length > options_.limits.max_payload_bytes) {
    violation = fmt::format("payload length {} exceeds limit {}", h.payload_length,
                            options_.limits.max_payload_bytes);
  } else if (h.type >= msgtype::kHandshakeHello && h.type <= msgtype::kHandshakeWelcome) {
    violation = fmt::format("handshake frame (type {}) after the handshake", h.type);
  }
  if (!violation.empty()) {
    std::string reason = fmt::format("protocol violation by {}: {}", peer_name, violation);
    logger_.Warn("dropped connection {} with {}: {}", id, peer_name, reason);
    network_.SettleSend(sender, std::move(msg.on_sent),
                        std::make_exception_ptr(ProtocolError(reason)));
    CloseConnection(id, reason, PeerNotice::kClosed);
    return;
  }
  Message m;
  m.header = h;
  m.meta = std::move(msg.meta);
  if (h.payload_length > 0) {
    std::span<std::byte> dest;
    try {
      dest = handler_->PayloadDestination(id, m.header, m.meta);
    } catch (const std::exception& e) {
      std::string reason = fmt::format(
          "error on the connection with {}: the payload destination "
          "callback threw: {}",
          peer_name, e.what());
      logger_.Warn("dropped connection {} with {}: {}", id, peer_name, reason);
      network_.SettleSend(sender, std::move(msg.on_sent),
                          std::make_exception_ptr(PeerLost(reason)));
      CloseConnection(id, reason, PeerNotice::kClosed);
      return;
    }
    if (dest.size() == h.payload_length) {
      m.payload.bytes = dest;
    } else {
      m.payload.owned = std::make_unique_for_overwrite<std::byte[]>(h.payload_length);
      m.payload.bytes = {m.payload.owned.get(), h.payload_length};
    }
    size_t at = 0;
    for (auto s : msg.payload) {
      if (!s.empty()) std::memcpy(m.payload.bytes.data() + at, s.data(), s.size());
      at += s.size();
    }
  }
  // The payload is copied: the sender may reuse its memory.
  network_.SettleSend(sender, std::move(msg.on_sent), nullptr);
  if (logger_.verbosity() >= 2) {
    logger_.V2(
        "recv from {} (connection {}): type {} flags {:#x} request {} meta {} B payload "
        "{} B{}",
        peer_name, id, h.type, h.flags, h.request_id, m.meta.size(), m.payload.bytes.size(),
        m.payload.in_posted_buffer() ? " (posted buffer)" : "");
  }
  try {
    handler_->OnMessage(id, std::move(m));
  } catch (const std::exception& e) {
    std::string reason = fmt::format(
        "error on the connection with {}: the message handler "
        "threw: {}",
        peer_name, e.what());
    logger_.Warn("dropped connection {} with {}: {}", id, peer_name, reason);
    CloseConnection(id, reason, PeerNotice::kClosed);
  }
}

void InProcTransport::Close(ConnectionId id) {
  std::string peer_name;
  {
    std::lock_guard lock(mu_);
    auto it = connections_.find(id);
    if (it == connections_.end() || it->second.closing || !it->second.established) return;
    it->second.closing = true;
    peer_name = it->second.peer_name;
  }
  std::string reason = fmt::format("connection with {} closed locally", peer_name);
  loop_->Post([this, id, reason] { CloseConnection(id, reason, PeerNotice::kClosed); });
}

void InProcTransport::CloseConnection(ConnectionId id, const std::string& reason,
                                      PeerNotice notice) {
  Connection c;
  {
    std::lock_guard lock(mu_);
    auto it = connections_.find(id);
    if (it == connections_.end() || it->second.closed) return;
    // Sends fail from now on; the entry stays until OnDisconnected returned,
    // so the handler can still ask Peer(id) there, as with TCP.
    it->second.closed = true;
    it->second.closing = true;
    c = it->second;
    it->second.connect_done.reset();
  }
  if (c.connect_done) {
    c.connect_done->set_value(DeferredError::From(std::make_exception_ptr(Error(reason))));
  }
  if (c.established) {
    logger_.V1("connection {} with {} closed: {}", id, c.peer_name, reason);
    try {
      handler_->OnDisconnected(id, reason);
    } catch (const std::exception& e) {
      logger_.Error("OnDisconnected for connection {} with {} threw: {}", id, c.peer_name,
                    e.what());
    }
  }
  {
    std::lock_guard lock(mu_);
    connections_.erase(id);
  }
  if (!c.established || notice == PeerNotice::kNone) return;
  network_.PostTo(c.peer_transport, [peer_id = c.peer_id, notice](InProcTransport& p) {
    p.OnPeerClosed(peer_id, notice);
  });
}

void InProcTransport::OnPeerClosed(ConnectionId id, PeerNotice notice) {
  std::string peer_name;
  {
    std::lock_guard lock(mu_);
    auto it = connections_.find(id);
    if (it == connections_.end()) return;
    peer_name = it->second.peer_name;
  }
  CloseConnection(id,
                  notice == PeerNotice::kShutDown
                      ? fmt::format("peer {} shut down its transport", peer_name)
                      : fmt::format("peer {} closed the connection", peer_name),
                  PeerNotice::kNone);
}

PeerInfo InProcTransport::Peer(ConnectionId id) const {
  std::lock_guard lock(mu_);
  auto it = connections_.find(id);
  if (it == connections_.end()) throw InvalidArgument(fmt::format("unknown connection id {}", id));
  return it->second.peer;
}

void InProcTransport::CloseEverything() {
  if (closed_everything_) return;
  closed_everything_ = true;
  std::vector<ConnectionId> ids;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, c] : connections_) ids.push_back(id);
  }
  for (ConnectionId id : ids) {
    CloseConnection(id, "transport shut down", PeerNotice::kShutDown);
  }
}

void InProcTransport::Shutdown() {
  if (loop_->IsLoopThread()) {
    throw InvalidArgument(
        "Shutdown() called from a transport callback; call it from another "
        "thread");
  }
  std::lock_guard guard(shutdown_mu_);
  network_.Unbind(number_);
  {
    std::lock_guard lock(mu_);
    shutting_down_ = true;
  }
  shutdown_cv_.notify_all();
  // Once every connection is closed no send reaches a peer any more; then
  // wait for the peers to settle what they already hold. Their threads
  // always run what was posted to them (even while stopping), so the wait
  // ends unless a peer's thread is blocked in a callback.
  std::promise<void> closed;
  if (loop_->Post([this, &closed] {
        CloseEverything();
        closed.set_value();
      })) {
    closed.get_future().wait();
  }
  {
    std::unique_lock lock(sends_mu_);
    constexpr auto kSettlePatience = std::chrono::seconds(10);
    if (!sends_cv_.wait_for(lock, kSettlePatience, [this] { return sends_out_ == 0; })) {
      logger_.Error(
          "shutting down with {} sent messages whose peers have not settled them after {} s "
          "(a peer's thread is blocked); their on_sent callbacks will not run",
          sends_out_, kSettlePatience.count());
    }
  }
  network_.Detach(number_);
  loop_->Stop();
}

}  // namespace tandem::net
