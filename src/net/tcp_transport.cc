#include "net/tcp_transport.h"

#include <fmt/format.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "net/socket_address.h"
#include "tandem/error.h"

namespace tandem::net {
namespace {

// Connections accepted per readiness event of a listener before the loop
// turns to other sockets.
constexpr int kMaxAcceptsPerEvent = 64;
// How long accepting pauses when the process is out of descriptors.
constexpr std::chrono::milliseconds kAcceptPause{100};
// Refusals of unauthenticated peers: this many are logged one by one per
// interval, the rest summed up in one line at its end.
constexpr int kRefusalsLogged = 5;
constexpr std::chrono::seconds kRefusalLogInterval{10};
// Unauthenticated connections closed before the heap is trimmed (once none
// is left).
constexpr uint64_t kTrimAfterClosed = 256;

}  // namespace

TcpTransport::TcpTransport(TransportOptions options, TransportHandler* handler,
                           base::Logger& logger, TcpTuning tuning)
    : options_(std::move(options)), tuning_(tuning), handler_(handler), logger_(logger) {
  if (handler_ == nullptr) throw InvalidArgument("TcpTransport needs a TransportHandler");
  loop_ = std::make_unique<EventLoop>("tandem-tcp");
}

TcpTransport::~TcpTransport() { Shutdown(); }

TcpConnection::Context TcpTransport::ConnectionContext() {
  return TcpConnection::Context{loop_.get(), handler_,  this,
                                &logger_,    &options_, &tuning_.send_queue};
}

std::shared_ptr<TcpConnection> TcpTransport::Find(ConnectionId id) const {
  std::lock_guard lock(mu_);
  auto it = connections_.find(id);
  return it == connections_.end() ? nullptr : it->second;
}

TcpTuning TcpTuning::FromEnvironment(const base::Environment& env) {
  TcpTuning t;
  t.rto_min = std::chrono::milliseconds(
      env.GetInt("TANDEM_TCP_RTO_MIN_MS", kDefaultRtoMin.count(), 0, 200));
  t.send_queue = SendQueueBound::FromEnvironment(env);
  return t;
}

void TcpTransport::ConfigureSocket(int fd) {
  SetNoDelay(fd);
  SetBufferSizes(fd, tuning_.socket_buffer_bytes);
  if (tuning_.rto_min.count() > 0 && !SetRtoMin(fd, tuning_.rto_min) &&
      !rto_min_refused_.exchange(true)) {
    logger_.Warn(
        "TANDEM_TCP_RTO_MIN_MS={} not applied: this kernel refuses TCP_RTO_MIN_US (Linux 6.15 "
        "or later has it); connections keep the kernel's minimum retransmission time-out",
        std::chrono::duration_cast<std::chrono::milliseconds>(tuning_.rto_min).count());
  }
}

Endpoint TcpTransport::Listen(const Endpoint& local) {
  {
    std::lock_guard lock(mu_);
    if (shutting_down_) {
      throw Error(fmt::format("cannot listen on {}: the transport is shut down", local.ToString()));
    }
  }
  auto listener = std::make_shared<Listener>();
  listener->fd = ListenOn(local, &listener->bound);
  auto install = [this, listener] {
    if (closed_everything_) {
      throw Error(fmt::format("cannot listen on {}: the transport is shut down",
                              listener->bound.ToString()));
    }
    Listener* l = listener.get();
    l->watch = loop_->AddFd(l->fd.get(), EPOLLIN, [this, l](uint32_t) { OnAcceptable(l); });
    listeners_.push_back(listener);
  };
  if (loop_->InCallback()) {
    install();
  } else {
    auto done = std::make_shared<std::promise<DeferredError>>();
    auto future = done->get_future();
    bool posted = loop_->Post([install, done] {
      try {
        install();
        done->set_value(DeferredError());
      } catch (...) {
        done->set_value(DeferredError::From(std::current_exception()));
      }
    });
    if (!posted) {
      throw Error(fmt::format("cannot listen on {}: the transport is shut down", local.ToString()));
    }
    future.get().ThrowIfSet();
  }
  logger_.V1("listening on {}", listener->bound.ToString());
  return listener->bound;
}

void TcpTransport::OnAcceptable(Listener* listener) {
  for (int i = 0; i < kMaxAcceptsPerEvent; ++i) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int fd = ::accept4(listener->fd.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      if (err == EINTR || err == ECONNABORTED) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        // The pending connection stays in the backlog and would wake us at
        // once again; pause instead of spinning.
        logger_.Warn("cannot accept connections on {}: {}; pausing for {} ms",
                     listener->bound.ToString(), ErrnoText(err), kAcceptPause.count());
        loop_->ModifyFd(listener->watch, 0);
        loop_->RunAfter(kAcceptPause, [this, listener] {
          if (!closed_everything_) loop_->ModifyFd(listener->watch, EPOLLIN);
        });
        return;
      }
      logger_.Warn("accepting a connection on {} failed: {}", listener->bound.ToString(),
                   ErrnoText(err));
      return;
    }
    base::UniqueFd owned(fd);
    PeerInfo peer{SocketAddress(reinterpret_cast<sockaddr*>(&ss), len).ToEndpoint(), true};
    try {
      ConfigureSocket(fd);
    } catch (const IoError& e) {
      LogRefusal(fmt::format("dropped connection from {}: {}", peer.address.ToString(), e.what()));
      continue;
    }
    std::string name = peer.address.ToString();
    Adopt(std::move(owned), std::move(peer), std::move(name), TcpConnection::Role::kServer);
  }
}

std::shared_ptr<TcpConnection> TcpTransport::Adopt(
    base::UniqueFd fd, PeerInfo peer, std::string peer_name, TcpConnection::Role role,
    std::shared_ptr<std::promise<DeferredError>> waiter) {
  ConnectionId id = next_id_.fetch_add(1);
  auto c = std::make_shared<TcpConnection>(id, std::move(fd), std::move(peer), std::move(peer_name),
                                           role, ConnectionContext());
  // Registered before Start() so that an immediate failure finds them.
  if (waiter) connect_waiters_.emplace(id, std::move(waiter));
  {
    std::lock_guard lock(mu_);
    connections_.emplace(id, c);
  }
  try {
    c->Start();
  } catch (const std::exception& e) {
    std::string reason =
        fmt::format("cannot start the connection with {}: {}", c->peer_name(), e.what());
    if (role == TcpConnection::Role::kServer) LogRefusal("dropped connection: " + reason);
    c->Close(reason, std::current_exception());
    return c;
  }
  if (role == TcpConnection::Role::kServer && !c->established()) {
    unauthenticated_.emplace(id, c);
    unauthenticated_now_.store(unauthenticated_.size(), std::memory_order_relaxed);
    if (unauthenticated_.size() > options_.max_unauthenticated) {
      // The oldest goes: a flood of idle connections cannot hold more than
      // the bound's memory, and a real peer authenticates within moments.
      std::shared_ptr<TcpConnection> oldest = unauthenticated_.begin()->second.lock();
      if (oldest) {
        std::string why = fmt::format(
            "{} did not authenticate before {} newer connections arrived "
            "(TANDEM_MAX_UNAUTHENTICATED={})",
            oldest->peer_name(), options_.max_unauthenticated, options_.max_unauthenticated);
        OnRefused(*oldest, why);
        oldest->Close(why, std::make_exception_ptr(Timeout(why)));
      } else {
        unauthenticated_.erase(unauthenticated_.begin());
      }
    }
  }
  return c;
}

void TcpTransport::OnRefused(TcpConnection& c, const std::string& reason) {
  LogRefusal(
      fmt::format("dropped connection from {} (connection {}): {}", c.peer_name(), c.id(), reason));
}

void TcpTransport::LogRefusal(const std::string& text) {
  const auto now = std::chrono::steady_clock::now();
  if (now - refusal_window_start_ >= kRefusalLogInterval) {
    refusal_window_start_ = now;
    refusals_in_window_ = 0;
  }
  if (++refusals_in_window_ <= kRefusalsLogged) {
    logger_.Warn("{}", text);
    return;
  }
  ++refusals_unlogged_;
  last_unlogged_refusal_ = text;
  if (refusal_summary_armed_) return;
  refusal_summary_armed_ = true;
  loop_->RunAfter(kRefusalLogInterval, [this] {
    refusal_summary_armed_ = false;
    if (refusals_unlogged_ == 0) return;
    logger_.Warn(
        "{} more connections dropped before they authenticated in the last {} s; the "
        "last: {}",
        refusals_unlogged_,
        std::chrono::duration_cast<std::chrono::seconds>(kRefusalLogInterval).count(),
        last_unlogged_refusal_);
    refusals_unlogged_ = 0;
  });
}

UnauthenticatedStats TcpTransport::Unauthenticated() const {
  return {unauthenticated_now_.load(std::memory_order_relaxed),
          unauthenticated_dropped_.load(std::memory_order_relaxed)};
}

bool TcpTransport::SleepUnlessShutdown(std::chrono::steady_clock::duration d) {
  std::unique_lock lock(mu_);
  return !shutdown_cv_.wait_for(lock, d, [this] { return shutting_down_; });
}

base::UniqueFd TcpTransport::ConnectSocket(const Endpoint& remote,
                                           std::chrono::milliseconds timeout,
                                           std::string* peer_name, PeerInfo* peer) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto backoff =
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(tuning_.initial_backoff);
  std::string last_error = "none";
  int attempts = 0;
  const base::SteadyClock steady;
  base::WaitReport report(steady, options_.wait_report_interval);
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (shutting_down_) {
        throw Error(
            fmt::format("the transport shut down while connecting to {}", remote.ToString()));
      }
    }
    ++attempts;
    Resolution r = Resolve(remote, /*passive=*/false);
    if (r.addresses.empty()) {
      last_error = fmt::format("resolving '{}': {}", remote.host, r.error_text);
      if (!r.retryable) {
        throw IoError(fmt::format("cannot connect to {}: {}", remote.ToString(), last_error));
      }
    }
    for (const SocketAddress& addr : r.addresses) {
      base::UniqueFd fd;
      // One attempt lasts at most a report interval, so that a peer whose
      // packets vanish (no refusal) is reported too.
      int err = ConnectBefore(
          addr,
          std::min(deadline, std::chrono::steady_clock::now() + options_.wait_report_interval),
          &fd);
      Endpoint resolved = addr.ToEndpoint();
      if (err == 0) {
        peer->address = resolved;
        peer->inbound = false;
        *peer_name = resolved.host == remote.host
                         ? remote.ToString()
                         : fmt::format("{} ({})", remote.ToString(), resolved.ToString());
        return fd;
      }
      last_error = fmt::format("connect to {}: {}", resolved.ToString(), ErrnoText(err));
      if (!IsRetryableConnectError(err)) {
        throw IoError(fmt::format("cannot connect to {}: {}", remote.ToString(), last_error));
      }
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      throw Timeout(
          fmt::format("connecting to {} timed out after {} ms ({} attempts); last "
                      "error: {}",
                      remote.ToString(), timeout.count(), attempts, last_error));
    }
    if (report.TakeDue()) {
      logger_.Warn(
          "still connecting to {} {} ({} attempts; last error: {}; gives up after {} s, "
          "TANDEM_CONNECT_TIMEOUT)",
          remote.ToString(), report.Lasted(), attempts, last_error,
          std::chrono::duration_cast<std::chrono::seconds>(timeout).count());
    }
    if (!SleepUnlessShutdown(std::min<std::chrono::steady_clock::duration>(
            std::min(backoff, deadline - now), report.NextIn()))) {
      throw Error(fmt::format("the transport shut down while connecting to {}", remote.ToString()));
    }
    backoff = std::min<std::chrono::steady_clock::duration>(backoff * 2, tuning_.max_backoff);
  }
}

ConnectionId TcpTransport::Connect(const Endpoint& remote, std::chrono::milliseconds timeout) {
  if (loop_->InCallback()) {
    throw InvalidArgument(fmt::format(
        "Connect({}) called from a transport callback; it blocks and must run elsewhere",
        remote.ToString()));
  }
  std::string peer_name;
  PeerInfo peer;
  base::UniqueFd fd = ConnectSocket(remote, timeout, &peer_name, &peer);
  ConfigureSocket(fd.get());

  auto done = std::make_shared<std::promise<DeferredError>>();
  auto future = done->get_future();
  auto id = std::make_shared<ConnectionId>(0);
  // std::function needs a copyable task, so the descriptor travels as an int
  // and is owned again on the loop thread.
  int raw = fd.Release();
  bool posted = loop_->Post([this, raw, peer, peer_name, done, id] {
    base::UniqueFd owned(raw);
    if (closed_everything_) {
      done->set_value(DeferredError::From(std::make_exception_ptr(
          Error(fmt::format("the transport shut down while connecting to {}", peer_name)))));
      return;
    }
    *id = Adopt(std::move(owned), peer, peer_name, TcpConnection::Role::kClient, done)->id();
  });
  if (!posted) {
    ::close(raw);
    throw Error(fmt::format("the transport shut down while connecting to {}", peer_name));
  }
  future.get().ThrowIfSet();  // AuthFailed, ProtocolError, Timeout, ...
  return *id;
}

void TcpTransport::OnEstablished(TcpConnection& c) {
  if (unauthenticated_.erase(c.id()) > 0) {
    unauthenticated_now_.store(unauthenticated_.size(), std::memory_order_relaxed);
  }
  if (c.peer().inbound) {
    logger_.V1("accepted connection {} from {}", c.id(), c.peer_name());
  } else {
    logger_.V1("connected to {} (connection {})", c.peer_name(), c.id());
  }
  try {
    handler_->OnConnected(c.id(), c.peer());
  } catch (const std::exception& e) {
    logger_.Error("OnConnected for connection {} with {} threw: {}", c.id(), c.peer_name(),
                  e.what());
  }
  auto it = connect_waiters_.find(c.id());
  if (it != connect_waiters_.end()) {
    it->second->set_value(DeferredError());
    connect_waiters_.erase(it);
  }
}

void TcpTransport::OnClosed(TcpConnection& c, const std::string& reason, std::exception_ptr error) {
  if (unauthenticated_.erase(c.id()) > 0) {
    unauthenticated_now_.store(unauthenticated_.size(), std::memory_order_relaxed);
    unauthenticated_dropped_.fetch_add(1, std::memory_order_relaxed);
#ifdef __GLIBC__
    // After a flood is gone, give its memory back: the freed connections
    // are small heap blocks that malloc would otherwise keep.
    ++closed_since_trim_;
    if (unauthenticated_.empty() && closed_since_trim_ >= kTrimAfterClosed) {
      closed_since_trim_ = 0;
      ::malloc_trim(0);
    }
#endif
  }
  if (c.established()) {
    logger_.V1("connection {} with {} closed: {}", c.id(), c.peer_name(), reason);
    try {
      handler_->OnDisconnected(c.id(), reason);
    } catch (const std::exception& e) {
      logger_.Error("OnDisconnected for connection {} with {} threw: {}", c.id(), c.peer_name(),
                    e.what());
    }
  }
  {
    std::lock_guard lock(mu_);
    connections_.erase(c.id());
  }
  auto it = connect_waiters_.find(c.id());
  if (it != connect_waiters_.end()) {
    it->second->set_value(
        DeferredError::From(error ? error : std::make_exception_ptr(PeerLost(reason))));
    connect_waiters_.erase(it);
  }
}

void TcpTransport::Send(ConnectionId id, OutgoingMessage msg) {
  std::shared_ptr<TcpConnection> c = Find(id);
  if (c) {
    c->Send(std::move(msg));
    return;
  }
  if (!msg.on_sent) return;
  auto error = std::make_exception_ptr(
      PeerLost(fmt::format("connection {} is closed or was never open", id)));
  auto fn = std::move(msg.on_sent);
  loop_->Post([fn = std::move(fn), error] { fn(error); });
}

void TcpTransport::Close(ConnectionId id) {
  std::shared_ptr<TcpConnection> c = Find(id);
  if (c) c->RequestClose(fmt::format("connection with {} closed locally", c->peer_name()));
}

PeerInfo TcpTransport::Peer(ConnectionId id) const {
  std::shared_ptr<TcpConnection> c = Find(id);
  if (!c) throw InvalidArgument(fmt::format("unknown connection id {}", id));
  return c->peer();
}

void TcpTransport::CloseEverything() {
  if (closed_everything_) return;
  closed_everything_ = true;
  for (auto& l : listeners_) loop_->RemoveFd(l->watch);
  listeners_.clear();
  std::vector<std::shared_ptr<TcpConnection>> all;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, c] : connections_) all.push_back(c);
  }
  for (auto& c : all) {
    std::string reason =
        fmt::format("transport shut down; connection with {} closed", c->peer_name());
    c->Close(reason, std::make_exception_ptr(Error(reason)));
  }
}

bool TcpTransport::ReadWhileWaiting(std::chrono::steady_clock::time_point deadline,
                                    const std::function<bool()>& done,
                                    std::chrono::milliseconds slice,
                                    std::chrono::microseconds spin) {
  // Every connection's socket is in the loop's caller set (TcpConnection::Start).
  return loop_->RunOnCaller(deadline, done, slice, spin);
}

void TcpTransport::Shutdown() {
  if (loop_->InCallback()) {
    throw InvalidArgument(
        "Shutdown() called from a transport callback; call it from another "
        "thread");
  }
  std::lock_guard guard(shutdown_mu_);
  {
    std::lock_guard lock(mu_);
    shutting_down_ = true;
  }
  shutdown_cv_.notify_all();
  loop_->Post([this] { CloseEverything(); });
  loop_->Stop();
}

}  // namespace tandem::net
