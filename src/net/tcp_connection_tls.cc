// TcpConnection, the TLS pump (docs/transport.md, "TLS"): the writer
// encrypts queued pieces into the session (small pieces gathered into one
// record, large ones encrypted in place) and sends the ciphertext; on_sent
// runs once a message is encrypted. The reader reads ciphertext into the
// session and decrypts into the frame reader's span, so a posted buffer
// still receives the payload directly. A peer whose first bytes are of the
// other protocol (TLS against plaintext, or the reverse) is refused with a
// message naming TANDEM_TLS.
#include <fmt/format.h>
#include <sys/socket.h>

#include <algorithm>

#include "net/tcp_connection.h"
#include "tandem/error.h"

namespace tandem::net {

namespace {

// With TLS, pieces shorter than one record's worth of plaintext are gathered
// (copied) into one SSL_write, so a stream of small messages becomes few full
// records rather than three small records per message; longer pieces are
// encrypted straight from the caller's memory.
constexpr size_t kTlsGatherBytes = 16 * 1024;

}  // namespace

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

}  // namespace tandem::net
