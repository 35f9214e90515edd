// libFuzzer target: arbitrary frames fed to the handshake state machines, as
// a connection's FrameReader under HandshakeLimits() would deliver them. The
// fuzzer cannot forge proofs (the nonces are fresh and the secret unknown to
// it), so what it explores is every malformed, misordered and oversized frame
// an unauthenticated peer can send. AuthFailed and ProtocolError are correct
// answers; anything else is a bug (docs/protocol-handshake.md).
//
// Input layout (scripts/make-fuzz-corpus.py writes seeds in it):
//   byte 0   bit 0: 0 plays the server (frames go to OnHello, OnProof),
//                   1 plays the client (Hello() is sent first, frames go to
//                   OnChallenge, OnWelcome); bits 1-7: chunk size - 1 for
//                   feeding the stream (0 meaning one byte at a time)
//   rest     the byte stream from the peer
// Credentials: job id "fuzz-job", secret "fuzz-secret".
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>

#include "net/frame_reader.h"
#include "net/hmac_handshake.h"
#include "tandem/error.h"

namespace {

using tandem::net::ClientHandshake;
using tandem::net::FrameSink;
using tandem::net::Header;
using tandem::net::Message;
using tandem::net::ServerHandshake;

[[noreturn]] void Violated(const char* what) {
  std::fprintf(stderr, "handshake_fuzz: invariant violated: %s\n", what);
  std::abort();
}

#define FUZZ_CHECK(cond) \
  do {                   \
    if (!(cond)) {       \
      Violated(#cond);   \
    }                    \
  } while (false)

tandem::net::HandshakeCredentials Credentials() { return {"fuzz-job", "fuzz-secret"}; }

void CheckReply(const tandem::net::OutgoingMessage& out) {
  FUZZ_CHECK(out.header.sender == Header::kNoNode);
  FUZZ_CHECK(out.header.recipient == Header::kNoNode);
  FUZZ_CHECK(out.payload.empty());
  FUZZ_CHECK(out.meta.size() <= tandem::net::HandshakeLimits().max_meta_bytes);
}

// Drives one side of the handshake with each frame the reader decodes.
class HandshakeSink : public FrameSink {
 public:
  explicit HandshakeSink(bool client) : client_(client) {
    if (client_) CheckReply(client_side_.Hello());
  }

  std::span<std::byte> PayloadDestination(const Header&, const std::string&) override {
    // HandshakeLimits() allows no payload, so no frame may get this far.
    Violated("a handshake frame with a payload passed the limits");
  }

  void OnFrame(Message&& msg) override {
    FUZZ_CHECK(msg.payload.bytes.empty());
    if (done_) return;  // the transport would leave the handshake here
    switch (frames_++) {
      case 0:
        if (client_) {
          CheckReply(client_side_.OnChallenge(msg));
        } else {
          CheckReply(server_side_.OnHello(msg));
        }
        break;
      case 1:
        if (client_) {
          client_side_.OnWelcome(msg);
        } else {
          CheckReply(server_side_.OnProof(msg));
        }
        done_ = true;
        break;
      default:
        Violated("a frame reached a completed handshake");
    }
  }

 private:
  bool client_;
  ClientHandshake client_side_{Credentials()};
  ServerHandshake server_side_{Credentials()};
  unsigned frames_ = 0;
  bool done_ = false;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool client = (data[0] & 1u) != 0;
  const size_t chunk = (data[0] >> 1) + 1u;
  std::span<const uint8_t> stream(data + 1, size - 1);

  HandshakeSink sink(client);
  tandem::net::FrameReader reader(tandem::net::HandshakeLimits(), &sink, 4096);
  try {
    while (!stream.empty()) {
      std::span<std::byte> span = reader.WritableSpan();
      size_t n = std::min({span.size(), stream.size(), chunk});
      std::memcpy(span.data(), stream.data(), n);
      reader.Commit(n);
      stream = stream.subspan(n);
    }
  } catch (const tandem::AuthFailed&) {
  } catch (const tandem::ProtocolError&) {
  }
  return 0;
}
