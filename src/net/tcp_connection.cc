#include "net/tcp_connection.h"

#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <limits>

#include "net/socket_address.h"
#include "tandem/error.h"

namespace tandem::net {
namespace {

// iovecs gathered into one sendmsg(); several small messages share a call.
constexpr size_t kMaxIov = 128;
// Reads per readiness event before yielding to other connections.
constexpr int kMaxReadsPerEvent = 8;
// The frame reader's staging buffer; spans larger than this are direct reads.
constexpr size_t kStagingBytes = 256 * 1024;
// While at least kLowWaterFrom bytes of a payload are outstanding, the
// socket reports readable only once min(rest, kLowWaterMax) bytes are there
// (SO_RCVLOWAT): fewer wake-ups and reads per large message, which measured
// 25-40% more throughput for 16-64 MiB messages on loopback.
constexpr size_t kLowWaterFrom = 512 * 1024;
constexpr size_t kLowWaterMax = 1024 * 1024;

bool IsHandshakeType(uint16_t type) {
  return type >= msgtype::kHandshakeHello && type <= msgtype::kHandshakeWelcome;
}

}  // namespace

std::span<const std::byte> TcpConnection::PendingSend::Piece(size_t i) const {
  if (i == 0) return header;
  if (i == 1) return std::as_bytes(std::span(msg.meta.data(), msg.meta.size()));
  return msg.payload[i - 2];
}

TcpConnection::TcpConnection(ConnectionId id, UniqueFd fd, PeerInfo peer, std::string peer_name,
                             Role role, Context ctx)
    : id_(id),
      peer_(std::move(peer)),
      peer_name_(std::move(peer_name)),
      role_(role),
      ctx_(ctx),
      stage_(role == Role::kClient ? Stage::kClientAwaitChallenge : Stage::kServerAwaitHello),
      fd_(std::move(fd)) {}

TcpConnection::~TcpConnection() = default;

void TcpConnection::Start() {
  reader_ = std::make_unique<FrameReader>(HandshakeLimits(), this, kStagingBytes);
  HandshakeCredentials creds{ctx_.options->job_id, ctx_.options->secret};
  if (role_ == Role::kClient) {
    client_handshake_.emplace(creds);
  } else {
    server_handshake_.emplace(creds);
  }
  {
    std::lock_guard lock(mu_);
    // The loop holds the connection while a callback of it runs, so the
    // callback may close it and drop the transport's reference.
    auto self = shared_from_this();
    watch_ = ctx_.loop->AddFd(fd_.get(), EPOLLIN, [self](uint32_t ev) { self->OnEvents(ev); });
    registered_ = true;
  }
  std::weak_ptr<TcpConnection> weak = weak_from_this();
  handshake_timer_ = ctx_.loop->RunAfter(ctx_.options->handshake_timeout, [weak] {
    if (auto c = weak.lock()) c->OnHandshakeTimeout();
  });
  if (role_ == Role::kClient) Enqueue(client_handshake_->Hello(), false);
}

void TcpConnection::Send(OutgoingMessage msg) {
  if (msg.meta.size() > std::numeric_limits<uint32_t>::max()) {
    throw InvalidArgument(
        fmt::format("message to {}: metadata of {} bytes exceeds the {} bytes a "
                    "header can describe",
                    peer_name_, msg.meta.size(), std::numeric_limits<uint32_t>::max()));
  }
  if (!established()) {
    Completions failed;
    if (msg.on_sent) failed.push_back(std::move(msg.on_sent));
    Complete(std::move(failed),
             std::make_exception_ptr(PeerLost(fmt::format(
                 "connection {} to {} has not finished authentication", id_, peer_name_))));
    return;
  }
  if (ctx_.logger->verbosity() >= 2) {
    uint64_t payload = 0;
    for (auto s : msg.payload) payload += s.size();
    ctx_.logger->V2(
        "send to {} (connection {}): type {} flags {:#x} request {} meta {} B "
        "payload {} B in {} spans",
        peer_name_, id_, msg.header.type, msg.header.flags, msg.header.request_id, msg.meta.size(),
        payload, msg.payload.size());
  }
  const bool may_wait = msg.may_wait;
  Enqueue(std::move(msg), may_wait);
}

uint64_t TcpConnection::queued_bytes() const {
  std::lock_guard lock(mu_);
  return queued_bytes_;
}

void TcpConnection::Enqueue(OutgoingMessage msg, bool may_wait) {
  msg.header.meta_length = static_cast<uint32_t>(msg.meta.size());
  msg.header.payload_length = 0;
  for (auto s : msg.payload) msg.header.payload_length += s.size();
  PendingSend pending{std::move(msg), {}, 0, 0};
  EncodeHeader(pending.msg.header, pending.header);
  pending.bytes = kHeaderSize + pending.msg.meta.size() + pending.msg.header.payload_length;
  SendQueueMeter* meter = ctx_.send_queue->meter;
  if (meter) pending.role = meter->RoleOf(pending.msg.header.recipient);
  const bool on_loop = ctx_.loop->IsLoopThread();

  Completions done;
  Completions failed;
  std::string error;
  bool post_flush = false;
  {
    std::unique_lock lock(mu_);
    // The loop thread never waits: it is the thread that drains the queue.
    if (may_wait && !on_loop) WaitForRoomLocked(lock, pending.bytes, pending.role);
    if (write_closed_) {
      if (pending.msg.on_sent) failed.push_back(std::move(pending.msg.on_sent));
      error = write_error_;
    } else {
      bool idle = queue_.empty();
      bool has_callback = static_cast<bool>(pending.msg.on_sent);
      queued_bytes_ += pending.bytes;
      if (meter) meter->AddQueued(pending.role, static_cast<int64_t>(pending.bytes));
      queue_.push_back(std::move(pending));
      // Who writes (docs/transport.md, "Zero-copy send"):
      //  - a non-empty queue, or one a posted flush will look at: the loop;
      //  - an idle queue, from the loop thread or for a message without
      //    on_sent: the calling thread, at once (no thread hop);
      //  - an idle queue, from another thread, for a message with on_sent:
      //    the loop, woken once. on_sent must run there anyway, and while it
      //    writes, further sends pile up behind and leave in one sendmsg();
      //    writing here instead would wake the loop once per message just
      //    for the callbacks, which measured several times slower for 4 KiB
      //    streams (docs/benchmarks.md).
      if (idle && !flush_posted_) {
        if (!on_loop && has_callback) {
          flush_posted_ = true;
          post_flush = true;
        } else {
          FlushLocked(done);
        }
      }
      if (write_closed_) {
        error = write_error_;
        DropQueueLocked(failed);
      }
    }
  }
  if (post_flush) ctx_.loop->Post([self = shared_from_this()] { self->RunPostedFlush(); });
  Complete(std::move(done), nullptr);
  if (!error.empty()) {
    Complete(std::move(failed), std::make_exception_ptr(PeerLost(
                                    fmt::format("message to {} not sent: {}", peer_name_, error))));
  }
}

void TcpConnection::WaitForRoomLocked(std::unique_lock<std::mutex>& lock, uint64_t bytes,
                                      int role) {
  const uint64_t limit = ctx_.send_queue->max_queued_bytes;
  auto has_room = [&] {
    return write_closed_ || limit == 0 || queued_bytes_ == 0 || queued_bytes_ + bytes <= limit;
  };
  if (has_room()) return;
  SendQueueMeter* meter = ctx_.send_queue->meter;
  if (meter) meter->CountWait(role);
  const auto timeout = ctx_.send_queue->wait_timeout;
  if (room_cv_.wait_for(lock, timeout, has_room)) return;
  if (meter) meter->CountTimeout(role);
  throw Timeout(fmt::format(
      "sending {} B to {} (connection {}): waited {} ms for room in the send queue, which still "
      "holds {} B in {} messages of the {} B allowed (TANDEM_MAX_INFLIGHT_BYTES); the peer is "
      "not reading (TANDEM_SEND_WAIT_TIMEOUT)",
      bytes, peer_name_, id_, timeout.count(), queued_bytes_, queue_.size(), limit));
}

void TcpConnection::ReleaseLocked(const PendingSend& p) {
  queued_bytes_ -= p.bytes;
  if (ctx_.send_queue->meter)
    ctx_.send_queue->meter->AddQueued(p.role, -static_cast<int64_t>(p.bytes));
}

void TcpConnection::DropQueueLocked(Completions& failed) {
  for (auto& p : queue_) {
    if (p.msg.on_sent) failed.push_back(std::move(p.msg.on_sent));
    ReleaseLocked(p);
  }
  queue_.clear();
  room_cv_.notify_all();
}

void TcpConnection::RunPostedFlush() {
  Completions done;
  Completions failed;
  std::string error;
  {
    std::lock_guard lock(mu_);
    flush_posted_ = false;
    if (!write_closed_ && !queue_.empty() && !want_write_) FlushLocked(done);
    if (write_closed_) {
      error = write_error_;
      DropQueueLocked(failed);
    }
  }
  RunCompletions(done, nullptr);
  if (!error.empty()) {
    RunCompletions(failed, std::make_exception_ptr(PeerLost(
                               fmt::format("message to {} not sent: {}", peer_name_, error))));
  }
}

void TcpConnection::FlushLocked(Completions& done) {
  while (!queue_.empty()) {
    iovec iov[kMaxIov];
    size_t count = 0;
    size_t total = 0;
    for (const PendingSend& p : queue_) {
      for (size_t i = p.piece; i < p.piece_count() && count < kMaxIov; ++i) {
        auto piece = p.Piece(i);
        size_t skip = i == p.piece ? p.offset : 0;
        if (piece.size() == skip) continue;
        iov[count].iov_base = const_cast<std::byte*>(piece.data() + skip);
        iov[count].iov_len = piece.size() - skip;
        total += iov[count].iov_len;
        ++count;
      }
      if (count == kMaxIov) break;
    }
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = count;
    ssize_t n = ::sendmsg(fd_.get(), &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        SetWantWriteLocked(true);
        return;
      }
      write_error_ = fmt::format("write to {} failed: {}", peer_name_, ErrnoText(errno));
      write_closed_ = true;
      SetWantWriteLocked(false);
      // The loop closes the connection; Enqueue/OnWritable fail the queue.
      ctx_.loop->Post([self = shared_from_this(), reason = write_error_] {
        self->Close(reason, std::make_exception_ptr(PeerLost(reason)));
      });
      return;
    }
    // Advance the cursors over the n bytes the kernel took.
    size_t left = static_cast<size_t>(n);
    while (!queue_.empty()) {
      PendingSend& p = queue_.front();
      while (p.piece < p.piece_count()) {
        size_t rest = p.Piece(p.piece).size() - p.offset;
        if (left < rest) {
          p.offset += left;
          left = 0;
          break;
        }
        left -= rest;
        ++p.piece;
        p.offset = 0;
      }
      if (p.piece < p.piece_count()) break;
      if (p.msg.on_sent) done.push_back(std::move(p.msg.on_sent));
      ReleaseLocked(p);
      queue_.pop_front();
      room_cv_.notify_all();
      if (left == 0) break;
    }
    if (static_cast<size_t>(n) < total) {
      // The socket buffer is full; another call would only say EAGAIN.
      SetWantWriteLocked(true);
      return;
    }
  }
  SetWantWriteLocked(false);
}

void TcpConnection::SetWantWriteLocked(bool want) {
  if (want == want_write_ || !registered_) return;
  try {
    ctx_.loop->ModifyFd(watch_, EPOLLIN | (want ? EPOLLOUT : 0u));
    want_write_ = want;
  } catch (const IoError& e) {
    // Cannot happen for a registered socket; if it did, writes would stall
    // silently, so stop writing and let the loop close the connection.
    write_closed_ = true;
    write_error_ = fmt::format("cannot wait for {} to accept data: {}", peer_name_, e.what());
    ctx_.loop->Post([self = shared_from_this(), reason = write_error_] {
      self->Close(reason, std::make_exception_ptr(PeerLost(reason)));
    });
  }
}

void TcpConnection::Complete(Completions done, std::exception_ptr error) {
  if (done.empty()) return;
  // on_sent always runs on the loop thread, after the current callback, so a
  // caller never sees it run inside its own Send().
  ctx_.loop->Post([self = shared_from_this(), done = std::move(done), error]() mutable {
    self->RunCompletions(done, error);
  });
}

void TcpConnection::RunCompletions(Completions& done, std::exception_ptr error) {
  for (auto& fn : done) {
    try {
      fn(error);
    } catch (const std::exception& e) {
      ctx_.logger->Error("an on_sent callback for {} threw: {}", peer_name_, e.what());
    }
  }
}

void TcpConnection::OnEvents(uint32_t events) {
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) OnReadable();
  if (!closed_ && (events & EPOLLOUT)) OnWritable();
}

void TcpConnection::OnWritable() {
  Completions done;
  Completions failed;
  std::string error;
  {
    std::lock_guard lock(mu_);
    if (!write_closed_) FlushLocked(done);
    if (write_closed_) {
      error = write_error_;
      DropQueueLocked(failed);
    }
  }
  // An epoll callback is not inside anybody's Send(): run on_sent now.
  RunCompletions(done, nullptr);
  if (!error.empty()) {
    RunCompletions(failed, std::make_exception_ptr(PeerLost(
                               fmt::format("message to {} not sent: {}", peer_name_, error))));
  }
}

void TcpConnection::OnReadable() {
  for (int i = 0; i < kMaxReadsPerEvent; ++i) {
    std::span<std::byte> span = reader_->WritableSpan();
    ssize_t n = ::read(fd_.get(), span.data(), span.size());
    if (n > 0) {
      try {
        reader_->Commit(static_cast<size_t>(n));
      } catch (...) {
        Fail(std::current_exception());
        return;
      }
      if (closed_) return;
      // A short read drained the socket; level-triggered epoll reports any
      // later bytes.
      if (static_cast<size_t>(n) < span.size()) break;
      continue;
    }
    int err = n == 0 ? 0 : errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) break;
    std::string cause = err == 0 ? "closed the connection" : ErrnoText(err);
    if (!established() && role_ == Role::kClient && (err == 0 || err == ECONNRESET)) {
      std::string reason = fmt::format(
          "connection to {} closed during authentication (wrong TANDEM_SECRET or job id?)",
          peer_name_);
      Close(reason, std::make_exception_ptr(AuthFailed(reason)));
      return;
    }
    std::string reason;
    if (!established()) {
      reason = fmt::format("{} {} during authentication", peer_name_,
                           err == 0 ? "closed the connection" : "failed: " + cause);
      // A peer that hangs up before saying hello is most likely a TCP health
      // probe; one that hangs up after our challenge rejected our proof.
      if (stage_ == Stage::kServerAwaitHello && err == 0) {
        ctx_.logger->V1("dropped connection from {}: {}", peer_name_, reason);
      } else {
        ctx_.logger->Warn("dropped connection from {}: {}{}", peer_name_, reason,
                          stage_ == Stage::kServerAwaitProof
                              ? " (the client rejected our proof: wrong TANDEM_SECRET?)"
                              : "");
      }
    } else if (err == 0) {
      reason =
          reader_->AtFrameBoundary()
              ? fmt::format("peer {} closed the connection", peer_name_)
              : fmt::format("peer {} closed the connection in the middle of a message", peer_name_);
    } else {
      reason = fmt::format("reading from {} failed: {}", peer_name_, cause);
    }
    Close(reason, std::make_exception_ptr(PeerLost(reason)));
    return;
  }
  // However the loop ended, the low-water mark must fit what the reader
  // waits for now: one left from an earlier, larger rest might never be
  // reached and the connection would stall.
  UpdateReceiveLowWater();
}

void TcpConnection::UpdateReceiveLowWater() {
  // A span larger than the staging buffer is the rest of a payload being
  // read in place; only then is waiting for more bytes per wake-up right.
  size_t rest = reader_->WritableSpan().size();
  int want = 1;
  if (rest > kStagingBytes && rest >= kLowWaterFrom) {
    want = static_cast<int>(std::min(rest, kLowWaterMax));
    // Never ask for more than half the receive buffer can hold: on kernels
    // that do not grow the buffer to fit SO_RCVLOWAT the window would close
    // first and the wake-up never come.
    int rcvbuf = 0;
    socklen_t len = sizeof(rcvbuf);
    if (::getsockopt(fd_.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, &len) != 0) rcvbuf = 0;
    want = std::max(1, std::min(want, rcvbuf / 2));
  }
  if (want == rcvlowat_) return;
  // If this fails the socket keeps waking at every byte: slower, still right.
  if (::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want)) == 0) {
    rcvlowat_ = want;
  }
}

std::span<std::byte> TcpConnection::PayloadDestination(const Header& h, const std::string& meta) {
  if (stage_ != Stage::kEstablished || close_requested_.load(std::memory_order_relaxed)) {
    return {};
  }
  return ctx_.handler->PayloadDestination(id_, h, meta);
}

void TcpConnection::OnFrame(Message&& msg) {
  switch (stage_) {
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
  client_handshake_.reset();
  server_handshake_.reset();
  established_.store(true, std::memory_order_release);
  ctx_.owner->OnEstablished(*this);
}

void TcpConnection::OnHandshakeTimeout() {
  if (closed_ || established()) return;
  std::string reason = fmt::format("{} did not complete authentication within {} ms", peer_name_,
                                   ctx_.options->handshake_timeout.count());
  if (role_ == Role::kServer)
    ctx_.logger->Warn("dropped connection from {}: {}", peer_name_, reason);
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
  if (role_ == Role::kServer || established()) {
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
  Complete(std::move(failed), std::make_exception_ptr(PeerLost(
                                  fmt::format("message to {} not sent: {}", peer_name_, reason))));
  ctx_.owner->OnClosed(*this, reason, error);
}

}  // namespace tandem::net
