// TcpConnection, reading: each readiness event reads up to
// kMaxReadsPerEvent times, plaintext straight into the frame reader's span
// and ciphertext into the TLS session (tcp_connection_tls.cc); SO_RCVLOWAT
// follows what the reader waits for next. The end of the stream or a read
// error closes the connection with a reason that says at which stage, and,
// during a handshake, what the peer most likely runs with.
#include <fmt/format.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "net/socket_address.h"
#include "net/tcp_connection.h"
#include "tandem/error.h"

namespace tandem::net {

namespace {

// Reads per readiness event before yielding to other connections.
constexpr int kMaxReadsPerEvent = 8;
// While at least kLowWaterFrom bytes of a payload are outstanding, the
// socket reports readable only once min(rest, kLowWaterMax) bytes are there
// (SO_RCVLOWAT): fewer wake-ups and reads per large message, which measured
// 25-40% more throughput for 16-64 MiB messages on loopback.
constexpr size_t kLowWaterFrom = 512 * 1024;
constexpr size_t kLowWaterMax = 1024 * 1024;
// More than one TLS record (16 KiB of plaintext and its overhead).
constexpr size_t kTlsRecordSlack = 32 * 1024;

}  // namespace

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

}  // namespace tandem::net
