// TcpConnection, life cycle: [TLS handshake ->] HMAC handshake ->
// established -> closed (see tcp_connection.h). Start() registers the
// socket and arms the handshake deadline; OnFrame() drives the handshake's
// stages and, once established, hands frames to the TransportHandler; any
// failure closes the connection, and Close() fails what is still queued.
#include "net/tcp_connection.h"

#include <fmt/format.h>
#include <sys/epoll.h>

#include "tandem/error.h"

namespace tandem::net {

namespace {

bool IsHandshakeType(uint16_t type) {
  return type >= msgtype::kHandshakeHello && type <= msgtype::kHandshakeWelcome;
}

}  // namespace

TcpConnection::TcpConnection(ConnectionId id, base::UniqueFd fd, PeerInfo peer,
                             std::string peer_name, Role role, Context ctx)
    : id_(id),
      peer_(std::move(peer)),
      peer_name_(std::move(peer_name)),
      role_(role),
      ctx_(ctx),
      stage_(role == Role::kClient ? Stage::kClientAwaitChallenge : Stage::kServerAwaitHello),
      fd_(std::move(fd)) {}

TcpConnection::~TcpConnection() = default;

void TcpConnection::Start() {
  reader_ = std::make_unique<FrameReader>(HandshakeLimits(), this, kHandshakeStagingBytes);
  HandshakeCredentials creds{ctx_.options->job_id, ctx_.options->secret};
  if (role_ == Role::kClient) {
    client_handshake_.emplace(creds);
  } else {
    server_handshake_.emplace(creds);
  }
  if (ctx_.options->tls) {
    tls_ = std::make_unique<TlsSession>(*ctx_.options->tls, role_ == Role::kClient
                                                                ? TlsSession::Role::kClient
                                                                : TlsSession::Role::kServer);
    stage_ = Stage::kTlsHandshake;
  }
  {
    std::lock_guard lock(mu_);
    // The loop holds the connection while a callback of it runs, so the
    // callback may close it and drop the transport's reference.
    auto self = shared_from_this();
    // In the caller set: a thread waiting for what this connection brings
    // may read it itself (docs/transport.md, "Reading on the waiting thread").
    watch_ = ctx_.loop->AddFd(
        fd_.get(), EPOLLIN, [self](uint32_t ev) { self->OnEvents(ev); }, true);
    registered_ = true;
  }
  std::weak_ptr<TcpConnection> weak = weak_from_this();
  handshake_timer_ = ctx_.loop->RunAfter(ctx_.options->handshake_timeout, [weak] {
    if (auto c = weak.lock()) c->OnHandshakeTimeout();
  });
  if (tls_) {
    if (role_ == Role::kClient) {
      tls_->Handshake();  // produces the ClientHello
      OnWritable();
    }
  } else if (role_ == Role::kClient) {
    Enqueue(client_handshake_->Hello(), false);
  }
}

void TcpConnection::OnEvents(uint32_t events) {
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) OnReadable();
  if (!closed_ && (events & EPOLLOUT)) OnWritable();
}

std::span<std::byte> TcpConnection::PayloadDestination(const Header& h, const std::string& meta) {
  if (stage_ != Stage::kEstablished || close_requested_.load(std::memory_order_relaxed)) {
    return {};
  }
  return ctx_.handler->PayloadDestination(id_, h, meta);
}

void TcpConnection::OnFrame(Message&& msg) {
  switch (stage_) {
    case Stage::kTlsHandshake:
      // The reader only sees plaintext, which exists after the handshake.
      throw ProtocolError("a frame before the TLS handshake completed");
    case Stage::kClientAwaitChallenge:
      Enqueue(client_handshake_->OnChallenge(msg), false);
      stage_ = Stage::kClientAwaitWelcome;
      return;
    case Stage::kClientAwaitWelcome:
      client_handshake_->OnWelcome(msg);
      Establish();
      return;
    case Stage::kServerAwaitHello:
      Enqueue(server_handshake_->OnHello(msg), false);
      stage_ = Stage::kServerAwaitProof;
      return;
    case Stage::kServerAwaitProof:
      Enqueue(server_handshake_->OnProof(msg), false);
      Establish();
      return;
    case Stage::kEstablished:
      break;
  }
  if (close_requested_.load(std::memory_order_relaxed)) return;
  if (IsHandshakeType(msg.header.type)) {
    throw ProtocolError(
        fmt::format("handshake frame (type {}) after the handshake", msg.header.type));
  }
  if (ctx_.logger->verbosity() >= 2) {
    ctx_.logger->V2(
        "recv from {} (connection {}): type {} flags {:#x} request {} meta {} B "
        "payload {} B{}",
        peer_name_, id_, msg.header.type, msg.header.flags, msg.header.request_id, msg.meta.size(),
        msg.payload.bytes.size(), msg.payload.in_posted_buffer() ? " (posted buffer)" : "");
  }
  try {
    ctx_.handler->OnMessage(id_, std::move(msg));
  } catch (const std::exception& e) {
    throw Error(fmt::format("the message handler threw: {}", e.what()));
  }
}

void TcpConnection::Establish() {
  stage_ = Stage::kEstablished;
  ctx_.loop->Cancel(handshake_timer_);
  reader_->SetLimits(ctx_.options->limits);
  reader_->GrowStaging(kStagingBytes);
  client_handshake_.reset();
  server_handshake_.reset();
  established_.store(true, std::memory_order_release);
  ctx_.owner->OnEstablished(*this);
}

void TcpConnection::OnHandshakeTimeout() {
  if (closed_ || established()) return;
  std::string reason = fmt::format("{} did not complete authentication within {} ms", peer_name_,
                                   ctx_.options->handshake_timeout.count());
  if (role_ == Role::kServer) ctx_.owner->OnRefused(*this, reason);
  Close(reason, std::make_exception_ptr(Timeout(reason)));
}

void TcpConnection::Fail(std::exception_ptr error) {
  std::string reason;
  std::exception_ptr typed;
  try {
    std::rethrow_exception(error);
  } catch (const AuthFailed& e) {
    reason = fmt::format("authentication with {} failed: {}", peer_name_, e.what());
    typed = std::make_exception_ptr(AuthFailed(reason));
  } catch (const ProtocolError& e) {
    reason = fmt::format("protocol violation by {}: {}", peer_name_, e.what());
    typed = std::make_exception_ptr(ProtocolError(reason));
  } catch (const std::exception& e) {
    reason = fmt::format("error on the connection with {}: {}", peer_name_, e.what());
    typed = std::make_exception_ptr(Error(reason));
  }
  // A client's failed handshake reaches the caller of Connect(); everything
  // else would go unnoticed without a warning.
  if (role_ == Role::kServer && !established()) {
    ctx_.owner->OnRefused(*this, reason);
  } else if (established()) {
    ctx_.logger->Warn("dropped connection {} with {}: {}", id_, peer_name_, reason);
  }
  Close(reason, typed);
}

void TcpConnection::RequestClose(std::string reason) {
  if (close_requested_.exchange(true)) return;
  ctx_.loop->Post([self = shared_from_this(), reason = std::move(reason)] {
    self->Close(reason, std::make_exception_ptr(PeerLost(reason)));
  });
}

void TcpConnection::Close(const std::string& reason, std::exception_ptr error) {
  if (closed_) return;
  closed_ = true;
  close_requested_.store(true);
  if (handshake_timer_ != 0) ctx_.loop->Cancel(handshake_timer_);
  Completions failed;
  {
    std::lock_guard lock(mu_);
    if (!write_closed_) {
      write_closed_ = true;
      write_error_ = reason;
    }
    DropQueueLocked(failed);
    // Messages whose on_sent a posted flush still holds were written; that
    // task runs them as successes.
    if (registered_) {
      ctx_.loop->RemoveFd(watch_);
      registered_ = false;
    }
    fd_.Reset();
  }
  Complete(std::move(failed), NotSent(reason));
  ctx_.owner->OnClosed(*this, reason, error);
}

}  // namespace tandem::net
