// The authentication handshake every connection runs before anything else
// (docs/protocol-handshake.md): a mutual HMAC-SHA256 challenge-response over
// the job's secret (TANDEM_SECRET), bound to the job id and to one fresh nonce
// from each side.
//
//   client                                     server
//   Hello     {version, job id, client nonce}  ->
//             <-  Challenge {server nonce, server proof}
//   Proof     {client proof}                   ->
//             <-  Welcome {}
//
// The objects below are pure state machines: they build the frames to send
// and check the frames received, and never touch a socket, so the TCP
// transport, the in-process transport and the fuzzer drive the same code.
// The transport reads handshake frames with HandshakeLimits() and switches to
// the configured limits once the handshake succeeded.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "net/message.h"
#include "net/wire_format.h"

namespace tandem::net {

/// What both ends of a connection must agree on.
struct HandshakeCredentials {
  std::string job_id;  ///< TANDEM_JOB_ID; at most kMaxJobIdBytes bytes
  std::string secret;  ///< TANDEM_SECRET; the HMAC key (may be empty if every process agrees)
};

/// The longest job id the handshake carries.
inline constexpr size_t kMaxJobIdBytes = 256;
/// Bytes of each side's random nonce.
inline constexpr size_t kHandshakeNonceBytes = 32;
/// Bytes of an HMAC-SHA256 proof.
inline constexpr size_t kHandshakeProofBytes = 32;

/// Limits for frames exchanged before authentication (tiny meta, no
/// payload), so that an unauthenticated peer cannot make us allocate more
/// than a few hundred bytes. Any thread; never throws.
WireLimits HandshakeLimits();

/// The client side: one per outbound connection. Thread-safety: one thread
/// at a time (the connection's owner). Any exception leaves the object
/// failed; every later call throws ProtocolError.
class ClientHandshake {
 public:
  /// Throws InvalidArgument when the job id is longer than kMaxJobIdBytes.
  explicit ClientHandshake(HandshakeCredentials creds);

  /// The first frame the client sends: version, job id and a fresh nonce.
  /// Call once, first. Throws ProtocolError when called out of order, Error
  /// when the system's random generator fails.
  OutgoingMessage Hello();

  /// Checks the server's challenge (frame type, shape, and that its proof
  /// was made with our secret over our nonce) and returns the client's proof
  /// to send. Throws AuthFailed when the server's proof does not match,
  /// ProtocolError for a malformed or unexpected frame (also when called
  /// before Hello() or twice).
  OutgoingMessage OnChallenge(const Message& m);

  /// Checks the server's welcome, which completes the handshake. Throws
  /// ProtocolError unless `m` is a valid welcome arriving after OnChallenge().
  void OnWelcome(const Message& m);

 private:
  enum class Step { kStart, kAwaitChallenge, kAwaitWelcome, kDone, kFailed };

  HandshakeCredentials creds_;
  Step step_ = Step::kStart;
  std::array<std::byte, kHandshakeNonceBytes> client_nonce_{};
};

/// The server side: one per inbound connection. Thread-safety: one thread at
/// a time (the connection's owner). Any exception leaves the object failed;
/// every later call throws ProtocolError.
class ServerHandshake {
 public:
  /// Throws InvalidArgument when the job id is longer than kMaxJobIdBytes.
  explicit ServerHandshake(HandshakeCredentials creds);

  /// Checks the client's hello (frame type, shape, protocol version, job id)
  /// and returns the challenge to send: a fresh server nonce and the server's
  /// proof. Throws AuthFailed when the job id differs from ours,
  /// ProtocolError for a malformed or unexpected frame or another protocol
  /// version, Error when the system's random generator fails.
  OutgoingMessage OnHello(const Message& m);

  /// Checks the client's proof and returns the welcome to send; the peer is
  /// authenticated once this returns. Throws AuthFailed when the proof does
  /// not match (wrong secret), ProtocolError for a malformed or unexpected
  /// frame (also when called before OnHello() or twice).
  OutgoingMessage OnProof(const Message& m);

 private:
  enum class Step { kAwaitHello, kAwaitProof, kDone, kFailed };

  HandshakeCredentials creds_;
  Step step_ = Step::kAwaitHello;
  std::array<std::byte, kHandshakeNonceBytes> client_nonce_{};
  std::array<std::byte, kHandshakeNonceBytes> server_nonce_{};
};

}  // namespace tandem::net
