#include "net/hmac_handshake.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <climits>
#include <span>
#include <string_view>
#include <utility>

#include "base/byte_io.h"
#include "net/openssl_error.h"
#include "tandem/error.h"

namespace tandem::net {
namespace {

using Nonce = std::array<std::byte, kHandshakeNonceBytes>;
using Proof = std::array<std::byte, kHandshakeProofBytes>;

// Domain separation: the two proofs of one handshake are MACs of different
// messages, so a proof one side sends can never be played back as the other
// side's (docs/protocol-handshake.md, "Proofs").
constexpr std::string_view kServerLabel = "tandem-server";
constexpr std::string_view kClientLabel = "tandem-client";

// The largest handshake metadata: a hello with the longest job id.
constexpr uint32_t kMaxHandshakeMetaBytes = 512;
static_assert(sizeof(uint16_t) + sizeof(uint32_t) + kMaxJobIdBytes + kHandshakeNonceBytes <=
              kMaxHandshakeMetaBytes);

// A peer-supplied string made safe for a log line: quoted, with bytes outside
// printable ASCII (and the quote and backslash) escaped.
std::string Quoted(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u > 0x7E || c == '\'' || c == '\\') {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

void CheckCredentials(const HandshakeCredentials& creds) {
  if (creds.job_id.size() > kMaxJobIdBytes) {
    throw InvalidArgument(fmt::format("job id of {} bytes is longer than the {} bytes allowed",
                                      creds.job_id.size(), kMaxJobIdBytes));
  }
  if (creds.secret.size() > static_cast<size_t>(INT_MAX)) {
    throw InvalidArgument(fmt::format("secret of {} bytes is too long for HMAC (limit {})",
                                      creds.secret.size(), INT_MAX));
  }
}

Nonce FreshNonce() {
  Nonce nonce;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size())) !=
      1) {
    throw Error(
        fmt::format("cannot draw a handshake nonce: RAND_bytes failed: {}", OpenSslErrorText()));
  }
  return nonce;
}

// HMAC-SHA256(secret, label | u32 length of job id | job id | client nonce |
// server nonce), the length little-endian (docs/protocol-handshake.md).
Proof MakeProof(std::string_view label, const HandshakeCredentials& creds,
                std::span<const std::byte> client_nonce, std::span<const std::byte> server_nonce) {
  base::ByteWriter w;
  w.PutBytes(std::as_bytes(std::span(label.data(), label.size())));
  w.PutString(creds.job_id);
  w.PutBytes(client_nonce);
  w.PutBytes(server_nonce);
  const std::string& message = w.bytes();
  Proof proof;
  unsigned int length = 0;
  // std::string::data() is never null, so an empty secret is a valid empty key.
  const unsigned char* result =
      HMAC(EVP_sha256(), creds.secret.data(), static_cast<int>(creds.secret.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(),
           reinterpret_cast<unsigned char*>(proof.data()), &length);
  if (result == nullptr || length != proof.size()) {
    throw Error(fmt::format("HMAC-SHA256 of the handshake proof failed: {}", OpenSslErrorText()));
  }
  return proof;
}

bool SameProof(const Proof& expected, std::span<const std::byte> got) {
  // Constant time, so that timing does not reveal how many leading bytes of
  // a forged proof were right.
  return got.size() == expected.size() &&
         CRYPTO_memcmp(expected.data(), got.data(), expected.size()) == 0;
}

// Checks what every handshake frame shares: its type, no flags, no node ids
// (they are not known before authentication), no payload.
void CheckFrame(const Message& m, uint16_t expected_type) {
  const Header& h = m.header;
  if (h.type != expected_type) {
    throw ProtocolError(fmt::format("expected a {} (type {}), got a {} (type {})",
                                    MessageTypeName(expected_type), expected_type,
                                    MessageTypeName(h.type), h.type));
  }
  if (h.flags != 0) {
    throw ProtocolError(
        fmt::format("{} has flags 0x{:X}, expected none", MessageTypeName(h.type), h.flags));
  }
  if (h.sender != Header::kNoNode || h.recipient != Header::kNoNode) {
    throw ProtocolError(fmt::format("{} names sender {} and recipient {}, expected -1 and -1",
                                    MessageTypeName(h.type), h.sender, h.recipient));
  }
  if (h.payload_length != 0 || !m.payload.bytes.empty()) {
    throw ProtocolError(fmt::format("{} carries a payload of {} bytes, expected none",
                                    MessageTypeName(h.type),
                                    std::max<uint64_t>(h.payload_length, m.payload.bytes.size())));
  }
}

OutgoingMessage HandshakeFrame(uint16_t type, std::string meta) {
  OutgoingMessage out;
  out.header.type = type;
  out.header.sender = Header::kNoNode;
  out.header.recipient = Header::kNoNode;
  out.header.meta_length = static_cast<uint32_t>(meta.size());
  out.meta = std::move(meta);
  return out;
}

// Thrown for a frame that arrives when the state machine expects another
// step (or none): the peer broke the order of docs/protocol-handshake.md.
[[noreturn]] void ThrowOutOfOrder(std::string_view side, std::string_view call,
                                  std::string_view state) {
  throw ProtocolError(
      fmt::format("{} handshake: {} is out of order, the handshake {}", side, call, state));
}

}  // namespace

WireLimits HandshakeLimits() {
  WireLimits limits;
  limits.max_meta_bytes = kMaxHandshakeMetaBytes;
  limits.max_payload_bytes = 0;
  return limits;
}

// ---------------------------------------------------------------------------
// Client

ClientHandshake::ClientHandshake(HandshakeCredentials creds) : creds_(std::move(creds)) {
  CheckCredentials(creds_);
}

OutgoingMessage ClientHandshake::Hello() {
  if (step_ != Step::kStart) {
    step_ = Step::kFailed;
    ThrowOutOfOrder("client", "Hello()", "was already started");
  }
  step_ = Step::kFailed;  // until this step succeeds
  client_nonce_ = FreshNonce();
  base::ByteWriter w;
  w.Put(kProtocolVersion);
  w.PutString(creds_.job_id);
  w.PutBytes(client_nonce_);
  step_ = Step::kAwaitChallenge;
  return HandshakeFrame(msgtype::kHandshakeHello, w.Take());
}

OutgoingMessage ClientHandshake::OnChallenge(const Message& m) {
  switch (step_) {
    case Step::kAwaitChallenge:
      break;
    case Step::kStart:
      step_ = Step::kFailed;
      ThrowOutOfOrder("client", "a challenge", "has not sent its hello yet");
    case Step::kAwaitWelcome:
      step_ = Step::kFailed;
      ThrowOutOfOrder("client", "a second challenge", "awaits the welcome");
    case Step::kDone:
      step_ = Step::kFailed;
      ThrowOutOfOrder("client", "a challenge", "is already complete");
    case Step::kFailed:
      ThrowOutOfOrder("client", "a challenge", "failed earlier");
  }
  step_ = Step::kFailed;  // until this step succeeds
  CheckFrame(m, msgtype::kHandshakeChallenge);
  base::ByteReader r(m.meta, "handshake challenge");
  auto server_nonce = r.GetBytes(kHandshakeNonceBytes, "server nonce");
  auto server_proof = r.GetBytes(kHandshakeProofBytes, "server proof");
  r.ExpectEnd();
  if (!SameProof(MakeProof(kServerLabel, creds_, client_nonce_, server_nonce), server_proof)) {
    throw AuthFailed(fmt::format(
        "server proof does not match: the server of job {} does not know our secret (wrong "
        "TANDEM_SECRET on one side?)",
        Quoted(creds_.job_id)));
  }
  base::ByteWriter w;
  w.PutBytes(MakeProof(kClientLabel, creds_, client_nonce_, server_nonce));
  step_ = Step::kAwaitWelcome;
  return HandshakeFrame(msgtype::kHandshakeProof, w.Take());
}

void ClientHandshake::OnWelcome(const Message& m) {
  switch (step_) {
    case Step::kAwaitWelcome:
      break;
    case Step::kStart:
    case Step::kAwaitChallenge:
      step_ = Step::kFailed;
      ThrowOutOfOrder("client", "a welcome", "has not proved itself yet");
    case Step::kDone:
      step_ = Step::kFailed;
      ThrowOutOfOrder("client", "a second welcome", "is already complete");
    case Step::kFailed:
      ThrowOutOfOrder("client", "a welcome", "failed earlier");
  }
  step_ = Step::kFailed;  // until this step succeeds
  CheckFrame(m, msgtype::kHandshakeWelcome);
  base::ByteReader r(m.meta, "handshake welcome");
  r.ExpectEnd();
  step_ = Step::kDone;
}

// ---------------------------------------------------------------------------
// Server

ServerHandshake::ServerHandshake(HandshakeCredentials creds) : creds_(std::move(creds)) {
  CheckCredentials(creds_);
}

OutgoingMessage ServerHandshake::OnHello(const Message& m) {
  switch (step_) {
    case Step::kAwaitHello:
      break;
    case Step::kAwaitProof:
      step_ = Step::kFailed;
      ThrowOutOfOrder("server", "a second hello", "awaits the client's proof");
    case Step::kDone:
      step_ = Step::kFailed;
      ThrowOutOfOrder("server", "a hello", "is already complete");
    case Step::kFailed:
      ThrowOutOfOrder("server", "a hello", "failed earlier");
  }
  step_ = Step::kFailed;  // until this step succeeds
  CheckFrame(m, msgtype::kHandshakeHello);
  base::ByteReader r(m.meta, "handshake hello");
  auto version = r.Get<uint16_t>("protocol version");
  std::string job_id = r.GetString("job id", kMaxJobIdBytes);
  auto client_nonce = r.GetBytes(kHandshakeNonceBytes, "client nonce");
  r.ExpectEnd();
  if (version != kProtocolVersion) {
    throw ProtocolError(fmt::format("client speaks protocol version {}, this build speaks {}",
                                    version, kProtocolVersion));
  }
  if (job_id != creds_.job_id) {
    throw AuthFailed(fmt::format("client's job id {} differs from ours {}", Quoted(job_id),
                                 Quoted(creds_.job_id)));
  }
  std::copy(client_nonce.begin(), client_nonce.end(), client_nonce_.begin());
  server_nonce_ = FreshNonce();
  base::ByteWriter w;
  w.PutBytes(server_nonce_);
  w.PutBytes(MakeProof(kServerLabel, creds_, client_nonce_, server_nonce_));
  step_ = Step::kAwaitProof;
  return HandshakeFrame(msgtype::kHandshakeChallenge, w.Take());
}

OutgoingMessage ServerHandshake::OnProof(const Message& m) {
  switch (step_) {
    case Step::kAwaitProof:
      break;
    case Step::kAwaitHello:
      step_ = Step::kFailed;
      ThrowOutOfOrder("server", "a proof", "has not received the hello yet");
    case Step::kDone:
      step_ = Step::kFailed;
      ThrowOutOfOrder("server", "a second proof", "is already complete");
    case Step::kFailed:
      ThrowOutOfOrder("server", "a proof", "failed earlier");
  }
  step_ = Step::kFailed;  // until this step succeeds
  CheckFrame(m, msgtype::kHandshakeProof);
  base::ByteReader r(m.meta, "handshake proof");
  auto client_proof = r.GetBytes(kHandshakeProofBytes, "client proof");
  r.ExpectEnd();
  if (!SameProof(MakeProof(kClientLabel, creds_, client_nonce_, server_nonce_), client_proof)) {
    throw AuthFailed(
        fmt::format("client proof does not match: wrong TANDEM_SECRET? (the client claimed job {})",
                    Quoted(creds_.job_id)));
  }
  step_ = Step::kDone;
  return HandshakeFrame(msgtype::kHandshakeWelcome, std::string());
}

}  // namespace tandem::net
