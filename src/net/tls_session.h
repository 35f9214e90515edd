// TLS 1.3 on one connection, as a transform between plaintext and ciphertext
// buffers: OpenSSL never touches the socket (docs/transport.md, "TLS").
//
// The session sits on an OpenSSL BIO pair. The connection
//   - reads the socket straight into CiphertextSpace() and commits it, then
//     Decrypt()s into the frame reader's span (a posted receive buffer stays
//     the destination of the plaintext: no extra copy of the payload);
//   - Encrypt()s its queued plaintext into the pair and writes
//     PendingCiphertext() to the socket with its own send calls, under its
//     send lock, so that records OpenSSL produces while reading (handshake
//     messages, alerts) and records of messages never interleave on the wire.
// Both directions of the pair have a fixed capacity, so a fast sender stops
// at a full buffer (Encrypt returns 0) instead of growing memory.
//
// The handshake is explicit: Handshake() until it returns true, with
// ciphertext moved in between. Both sides present certificates and verify
// them against the context's CA.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <span>
#include <string>

#include "net/tls_context.h"

struct ssl_st;
struct bio_st;

namespace tandem::net {

/// Thread-safety: every method may be called from any thread; an internal
/// mutex serialises them, because the writer (any thread holding the
/// connection's send lock) and the reader (the loop thread) share one
/// OpenSSL object, which is not safe for concurrent use.
class TlsSession {
 public:
  enum class Role { kClient, kServer };
  enum class ReadResult {
    kData,      ///< plaintext was produced
    kWantMore,  ///< more ciphertext is needed
    kClosed,    ///< the peer ended the session (close_notify)
  };

  /// Bytes of each direction's ciphertext buffer.
  static constexpr size_t kDefaultBufferBytes = 1 << 20;

  /// A session of `role` from `ctx` (which must outlive it). Does no I/O.
  /// Throws Error when OpenSSL cannot allocate it.
  TlsSession(const TlsContext& ctx, Role role, size_t buffer_bytes = kDefaultBufferBytes);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  /// Advances the handshake with the ciphertext committed so far (the
  /// client's first call produces its hello). Returns true once it is
  /// complete; afterwards it does nothing and returns true. Throws AuthFailed
  /// when a certificate is refused (ours by the peer, as its alert says, or
  /// the peer's by us, with the verification error), ProtocolError for any
  /// other TLS failure (bytes that are not TLS, another protocol version).
  bool Handshake();
  /// True once Handshake() returned true.
  bool handshake_done() const { return done_.load(std::memory_order_acquire); }

  /// Encrypts a prefix of `plain` into the outgoing buffer; returns how
  /// many bytes it took: 0 when the buffer is full (send PendingCiphertext()
  /// first), which can leave a record inside OpenSSL: then the next call must
  /// pass the same bytes again. Requires handshake_done(). Throws
  /// ProtocolError when OpenSSL fails.
  size_t Encrypt(std::span<const std::byte> plain);

  /// The contiguous ciphertext waiting to be sent (empty when none; after
  /// it is consumed, a second part may follow when the buffer wrapped).
  std::span<const std::byte> PendingCiphertext();
  /// Drops the first `n` bytes of PendingCiphertext() (they were sent).
  void ConsumeCiphertext(size_t n);

  /// Contiguous room for ciphertext read from the socket (empty when the
  /// incoming buffer is full: Decrypt() first). Valid until the next call.
  std::span<std::byte> CiphertextSpace();
  /// Declares that `n` bytes were written at the start of CiphertextSpace().
  void CommitCiphertext(size_t n);

  /// Decrypts into `out` (non-empty); sets `*n` to the bytes produced for
  /// kData. Requires handshake_done(). Throws AuthFailed for a certificate
  /// alert from the peer (it refused us after our side had finished the
  /// handshake, as TLS 1.3 clients do), ProtocolError for anything else that
  /// is not valid TLS.
  ReadResult Decrypt(std::span<std::byte> out, size_t* n);

  /// "TLSv1.3 TLS_AES_256_GCM_SHA384, peer certificate CN=..." for logs.
  std::string Description();

 private:
  // Throws the exception for a failed SSL call that returned `ret`; returns
  // normally for SSL_ERROR_WANT_READ / WANT_WRITE. Requires mu_.
  void CheckResult(int ret, const char* during);

  std::mutex mu_;
  ssl_st* ssl_ = nullptr;      // owns the internal half of the pair
  bio_st* network_ = nullptr;  // the connection's half of the pair, owned
  std::atomic<bool> done_{false};
};

/// Telling a peer with the other TANDEM_TLS setting apart from garbage, by
/// the first bytes it sends (docs/transport.md, "TLS", "Mismatch"): a TLS
/// record starts with its content type (0x15 alert, 0x16 handshake) and the
/// major version 3; a tandem frame with the wire magic "TNDM". Both look at
/// most at the first bytes given; any thread; never throw.
bool StartsLikeTlsRecord(std::span<const std::byte> first_bytes);
bool StartsLikeTandemFrame(std::span<const std::byte> first_bytes);

/// What a TLS node sends, in the clear, to a peer whose first bytes were a
/// plaintext tandem frame before closing: a fatal protocol_version alert
/// record, which that peer recognises (StartsLikeTlsRecord) and reports as
/// the mismatch it is.
inline constexpr std::array<std::byte, 7> kPlaintextPeerAlert = {
    std::byte{0x15}, std::byte{0x03}, std::byte{0x03}, std::byte{0x00},
    std::byte{0x02}, std::byte{0x02}, std::byte{0x46}};

}  // namespace tandem::net
