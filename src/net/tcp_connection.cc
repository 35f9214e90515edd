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
// The frame reader's staging buffer once authenticated; spans larger than
// this are direct reads.
constexpr size_t kStagingBytes = 256 * 1024;
// Until then: the handshake's frames (a header and at most 512 bytes of
// metadata) fit, and a peer that never authenticates costs this, not
// kStagingBytes (docs/protocol-handshake.md, "Resources").
constexpr size_t kHandshakeStagingBytes = 1024;
// While at least kLowWaterFrom bytes of a payload are outstanding, the
// socket reports readable only once min(rest, kLowWaterMax) bytes are there
// (SO_RCVLOWAT): fewer wake-ups and reads per large message, which measured
// 25-40% more throughput for 16-64 MiB messages on loopback.
constexpr size_t kLowWaterFrom = 512 * 1024;
constexpr size_t kLowWaterMax = 1024 * 1024;
// With TLS, pieces shorter than one record's worth of plaintext are gathered
// (copied) into one SSL_write, so a stream of small messages becomes few full
// records rather than three small records per message; longer pieces are
// encrypted straight from the caller's memory.
constexpr size_t kTlsGatherBytes = 16 * 1024;
// More than one TLS record (16 KiB of plaintext and its overhead).
constexpr size_t kTlsRecordSlack = 32 * 1024;

bool IsHandshakeType(uint16_t type) {
  return type >= msgtype::kHandshakeHello && type <= msgtype::kHandshakeWelcome;
}

}  // namespace

std::span<const std::byte> TcpConnection::PendingSend::Piece(size_t i) const {
  if (i == 0) return header;
  if (i == 1) return std::as_bytes(std::span(msg.meta.data(), msg.meta.size()));
  return msg.payload[i - 2];
}

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
    watch_ = ctx_.loop->AddFd(fd_.get(), EPOLLIN, [self](uint32_t ev) { self->OnEvents(ev); });
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
      // With TLS the queue empties as soon as its messages are encrypted,
      // while their ciphertext may still wait for EPOLLOUT; then the loop
      // writes, and a sender only appends (no wake-up per message).
      bool idle = queue_.empty() && !want_write_;
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
  const base::SteadyClock steady;
  base::WaitReport report(steady, ctx_.options->wait_report_interval);
  while (!room_cv_.wait_for(lock, std::min(report.NextIn(), timeout - report.Waited()), has_room)) {
    if (report.Waited() >= timeout) break;
    if (report.TakeDue()) {
      ctx_.logger->Warn(
          "still waiting for room in the send queue to {} (connection {}) {}: {} B queued of "
          "the {} B allowed; the peer is not reading (gives up after {} s, "
          "TANDEM_SEND_WAIT_TIMEOUT)",
          peer_name_, id_, report.Lasted(), queued_bytes_, limit,
          std::chrono::duration_cast<std::chrono::seconds>(timeout).count());
    }
  }
  if (has_room()) return;
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
  if (tls_) {
    FlushTlsLocked(done);
    return;
  }
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
    ssize_t n = SendLocked(iov, count);
    if (n < 0) return;
    AdvanceLocked(static_cast<size_t>(n), done);
    if (static_cast<size_t>(n) < total) {
      // The socket buffer is full; another call would only say EAGAIN.
      SetWantWriteLocked(true);
      return;
    }
  }
  SetWantWriteLocked(false);
}

ssize_t TcpConnection::SendLocked(iovec* iov, size_t count) {
  msghdr mh{};
  mh.msg_iov = iov;
  mh.msg_iovlen = count;
  for (;;) {
    ssize_t n = ::sendmsg(fd_.get(), &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      SetWantWriteLocked(true);
    } else {
      StopWritingLocked(fmt::format("write to {} failed: {}", peer_name_, ErrnoText(errno)));
    }
    return -1;
  }
}

void TcpConnection::AdvanceLocked(size_t n, Completions& done) {
  size_t left = n;
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
}

void TcpConnection::StopWritingLocked(std::string reason) {
  write_error_ = std::move(reason);
  write_closed_ = true;
  SetWantWriteLocked(false);
  // The loop closes the connection; Enqueue/OnWritable fail the queue.
  ctx_.loop->Post([self = shared_from_this(), reason = write_error_] {
    self->Close(reason, std::make_exception_ptr(PeerLost(reason)));
  });
}

void TcpConnection::FlushTlsLocked(Completions& done) {
  for (;;) {
    std::span<const std::byte> cipher = tls_->PendingCiphertext();
    if (!cipher.empty()) {
      iovec iov{const_cast<std::byte*>(cipher.data()), cipher.size()};
      ssize_t n = SendLocked(&iov, 1);
      if (n < 0) return;
      tls_->ConsumeCiphertext(static_cast<size_t>(n));
      if (static_cast<size_t>(n) < cipher.size()) {
        SetWantWriteLocked(true);
        return;
      }
      continue;
    }
    if (!tls_->handshake_done()) break;
    bool produced = false;
    try {
      produced = EncryptQueuedLocked(done);
    } catch (const std::exception& e) {
      StopWritingLocked(fmt::format("encrypting for {} failed: {}", peer_name_, e.what()));
      return;
    }
    if (!produced) break;
  }
  SetWantWriteLocked(false);
}

bool TcpConnection::EncryptQueuedLocked(Completions& done) {
  bool produced = false;
  for (;;) {
    if (plain_taken_ < plain_.size()) {
      size_t n = tls_->Encrypt(std::span<const std::byte>(plain_).subspan(plain_taken_));
      if (n == 0) return true;  // the session's buffer is full of ciphertext
      produced = true;
      plain_taken_ += n;
      if (plain_taken_ == plain_.size()) {
        plain_.clear();
        plain_taken_ = 0;
      }
      continue;
    }
    if (queue_.empty()) return produced;
    {
      const PendingSend& p = queue_.front();
      std::span<const std::byte> rest = p.Piece(p.piece).subspan(p.offset);
      if (rest.size() >= kTlsGatherBytes) {
        size_t n = tls_->Encrypt(rest);
        if (n == 0) return true;
        produced = true;
        AdvanceLocked(n, done);
        continue;
      }
    }
    // Gather small pieces, stopping before a long one (encrypted in place).
    while (plain_.size() < kTlsGatherBytes && !queue_.empty()) {
      const PendingSend& p = queue_.front();
      std::span<const std::byte> rest = p.Piece(p.piece).subspan(p.offset);
      if (rest.size() >= kTlsGatherBytes && !plain_.empty()) break;
      size_t take = std::min(rest.size(), kTlsGatherBytes - plain_.size());
      plain_.insert(plain_.end(), rest.begin(), rest.begin() + static_cast<ptrdiff_t>(take));
      AdvanceLocked(take, done);
    }
  }
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
    // Plaintext goes straight where the frame reader wants it; ciphertext
    // into the TLS session, which then decrypts into the same places.
    std::span<std::byte> span = tls_ ? tls_->CiphertextSpace() : reader_->WritableSpan();
    if (span.empty()) {
      // DrainTls() empties the session's buffer after every read, so this
      // is a broken invariant; stop rather than spin on a readable socket.
      Fail(std::make_exception_ptr(ProtocolError("the TLS receive buffer is full")));
      return;
    }
    ssize_t n = ::read(fd_.get(), span.data(), span.size());
    if (n > 0) {
      std::span<std::byte> got = span.first(static_cast<size_t>(n));
      if (!(tls_ ? TakeCiphertext(got) : TakePlaintext(got))) return;
      // A short read drained the socket; level-triggered epoll reports any
      // later bytes.
      if (got.size() < span.size()) break;
      continue;
    }
    int err = n == 0 ? 0 : errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) break;
    OnEndOfStream(err);
    return;
  }
  // Handshake messages and alerts OpenSSL produced while reading.
  if (tls_ && !tls_->PendingCiphertext().empty()) OnWritable();
  // However the loop ended, the low-water mark must fit what the reader
  // waits for now: one left from an earlier, larger rest might never be
  // reached and the connection would stall.
  if (!closed_) UpdateReceiveLowWater();
}

bool TcpConnection::TakePlaintext(std::span<const std::byte> got) {
  if (reader_->bytes_consumed() == 0 && RefusePeerSpeakingTls(got)) return false;
  try {
    reader_->Commit(got.size());
  } catch (...) {
    Fail(std::current_exception());
    return false;
  }
  return !closed_;
}

bool TcpConnection::TakeCiphertext(std::span<const std::byte> got) {
  const bool first = !tls_received_;
  tls_received_ = true;
  if (first && RefusePeerSpeakingPlaintext(got)) return false;
  tls_->CommitCiphertext(got.size());
  return DrainTls();
}

bool TcpConnection::DrainTls() {
  try {
    if (!tls_->handshake_done()) {
      if (!tls_->Handshake()) return true;
      OnTlsEstablished();
      if (closed_) return false;
    }
    for (;;) {
      std::span<std::byte> span = reader_->WritableSpan();
      size_t n = 0;
      TlsSession::ReadResult r = tls_->Decrypt(span, &n);
      if (r == TlsSession::ReadResult::kWantMore) return true;
      if (r == TlsSession::ReadResult::kClosed) {
        OnEndOfStream(0);
        return false;
      }
      reader_->Commit(n);
      if (closed_) return false;
    }
  } catch (...) {
    std::exception_ptr error = std::current_exception();
    SendTlsAlert();
    Fail(error);
    return false;
  }
}

void TcpConnection::SendTlsAlert() {
  std::lock_guard lock(mu_);
  if (write_closed_) return;
  std::span<const std::byte> alert = tls_->PendingCiphertext();
  if (!alert.empty()) {
    (void)::send(fd_.get(), alert.data(), alert.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  // Closing with unread bytes would send a reset, which can overtake the
  // alert; read what has arrived (a few records at most) first.
  char sink[16384];
  for (int i = 0; i < 4 && ::recv(fd_.get(), sink, sizeof(sink), MSG_DONTWAIT) > 0; ++i) {
  }
}

void TcpConnection::OnTlsEstablished() {
  if (ctx_.logger->verbosity() >= 1) {
    ctx_.logger->V1("TLS with {}: {}", peer_name_, tls_->Description());
  }
  if (role_ == Role::kClient) {
    stage_ = Stage::kClientAwaitChallenge;
    // Leaves behind the client's last handshake record, in one write.
    Enqueue(client_handshake_->Hello(), false);
  } else {
    stage_ = Stage::kServerAwaitHello;
  }
}

bool TcpConnection::RefusePeerSpeakingTls(std::span<const std::byte> first) {
  if (!StartsLikeTlsRecord(first)) return false;
  std::string reason;
  if (role_ == Role::kServer) {
    reason = fmt::format(
        "{} opened with a TLS hello: it runs with TANDEM_TLS=1 and this process without; every "
        "process of a job must have the same TANDEM_TLS",
        peer_name_);
    ctx_.logger->Warn("dropped connection from {}: {}", peer_name_, reason);
  } else {
    reason = fmt::format(
        "{} answered with TLS: it runs with TANDEM_TLS=1 and this process without; every process "
        "of a job must have the same TANDEM_TLS",
        peer_name_);
  }
  Close(reason, std::make_exception_ptr(ProtocolError(reason)));
  return true;
}

bool TcpConnection::RefusePeerSpeakingPlaintext(std::span<const std::byte> first) {
  if (StartsLikeTlsRecord(first) || !StartsLikeTandemFrame(first)) return false;
  std::string reason = fmt::format(
      "{} sent plaintext tandem frames: it runs without TANDEM_TLS=1 and this process with it; "
      "every process of a job must have the same TANDEM_TLS",
      peer_name_);
  if (role_ == Role::kServer) {
    ctx_.logger->Warn("dropped connection from {}: {}", peer_name_, reason);
    // Tell the plaintext client in a way it recognises (a TLS alert record)
    // before hanging up; best effort, the socket is new and empty.
    std::lock_guard lock(mu_);
    (void)::send(fd_.get(), kPlaintextPeerAlert.data(), kPlaintextPeerAlert.size(),
                 MSG_NOSIGNAL | MSG_DONTWAIT);
    char sink[4096];  // the rest of its hello, so that closing sends no reset
    (void)::recv(fd_.get(), sink, sizeof(sink), MSG_DONTWAIT);
  }
  Close(reason, std::make_exception_ptr(ProtocolError(reason)));
  return true;
}

void TcpConnection::OnEndOfStream(int err) {
  std::string cause = err == 0 ? "closed the connection" : ErrnoText(err);
  const bool peer_hung_up = err == 0 || err == ECONNRESET;
  if (stage_ == Stage::kTlsHandshake) {
    std::string reason;
    if (role_ == Role::kClient && peer_hung_up && !tls_received_) {
      // A TLS server answers a hello, if only with an alert; silence and a
      // hang-up is what a plaintext tandem node does (it drops the
      // connection for a bad frame magic).
      reason = fmt::format(
          "{} closed the connection without answering our TLS hello: it most likely runs "
          "without TANDEM_TLS=1 while this process runs with it; every process of a job must "
          "have the same TANDEM_TLS",
          peer_name_);
      Close(reason, std::make_exception_ptr(ProtocolError(reason)));
      return;
    }
    reason = fmt::format("{} {} during the TLS handshake", peer_name_,
                         err == 0 ? "closed the connection" : "failed: " + cause);
    if (role_ == Role::kServer) {
      if (err == 0 && !tls_received_) {
        ctx_.logger->V1("dropped connection from {}: {}", peer_name_, reason);  // a TCP probe
      } else {
        ctx_.logger->Warn("dropped connection from {}: {}", peer_name_, reason);
      }
    }
    Close(reason, std::make_exception_ptr(PeerLost(reason)));
    return;
  }
  if (!established() && role_ == Role::kClient && peer_hung_up) {
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
}

void TcpConnection::UpdateReceiveLowWater() {
  // A span larger than the staging buffer is the rest of a payload being
  // read in place; only then is waiting for more bytes per wake-up right.
  size_t rest = reader_->WritableSpan().size();
  if (tls_) {
    // Up to one record of ciphertext may already sit in the session, so
    // fewer than `rest` bytes may still come; the mark stays below that.
    rest = rest > kTlsRecordSlack ? rest - kTlsRecordSlack : 0;
  }
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
  Complete(std::move(failed), std::make_exception_ptr(PeerLost(
                                  fmt::format("message to {} not sent: {}", peer_name_, reason))));
  ctx_.owner->OnClosed(*this, reason, error);
}

}  // namespace tandem::net
