// The HMAC-SHA256 challenge-response of docs/protocol-handshake.md: success,
// wrong secrets and job ids, replays, reflections, malformed and misordered
// frames.
#include "net/hmac_handshake.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <array>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "base/byte_io.h"
#include "net/frame_reader.h"
#include "tandem/error.h"

namespace tandem::net {
namespace {

using testing::HasSubstr;
using testing::Not;

class OneFrameSink : public FrameSink {
 public:
  std::span<std::byte> PayloadDestination(const Header&, const std::string&) override { return {}; }
  void OnFrame(Message&& msg) override { frames.push_back(std::move(msg)); }
  std::vector<Message> frames;
};

// Sends `out` through the real wire: encodes it as the transport would and
// decodes it with a FrameReader under HandshakeLimits(), so every handshake
// frame is also checked to fit those limits.
Message Deliver(const OutgoingMessage& out) {
  EXPECT_EQ(out.header.sender, Header::kNoNode);
  EXPECT_EQ(out.header.recipient, Header::kNoNode);
  EXPECT_TRUE(out.payload.empty());
  Header h = out.header;
  h.meta_length = static_cast<uint32_t>(out.meta.size());
  h.payload_length = 0;
  std::vector<std::byte> bytes(kHeaderSize);
  EncodeHeader(h, std::span<std::byte, kHeaderSize>(bytes.data(), kHeaderSize));
  auto meta = std::as_bytes(std::span(out.meta.data(), out.meta.size()));
  bytes.insert(bytes.end(), meta.begin(), meta.end());
  OneFrameSink sink;
  FrameReader reader(HandshakeLimits(), &sink);
  auto span = reader.WritableSpan();
  EXPECT_GE(span.size(), bytes.size());
  std::memcpy(span.data(), bytes.data(), bytes.size());
  reader.Commit(bytes.size());
  EXPECT_EQ(sink.frames.size(), 1u);
  return std::move(sink.frames.at(0));
}

// A handshake frame built by hand (for forged and malformed input).
Message Frame(uint16_t type, std::string meta) {
  Message m;
  m.header.type = type;
  m.header.meta_length = static_cast<uint32_t>(meta.size());
  m.meta = std::move(meta);
  return m;
}

std::string Str(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// The documented proof, computed independently of hmac_handshake.cc:
// HMAC-SHA256(secret, label | u32le len(job id) | job id | client nonce |
// server nonce).
std::string DocumentedProof(const std::string& label, const std::string& job_id,
                            const std::string& secret, const std::string& client_nonce,
                            const std::string& server_nonce) {
  std::string msg = label;
  uint32_t len = static_cast<uint32_t>(job_id.size());
  msg.append(reinterpret_cast<const char*>(&len), 4);
  msg += job_id + client_nonce + server_nonce;
  unsigned char out[32];
  unsigned int out_len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &out_len);
  EXPECT_EQ(out_len, 32u);
  return {reinterpret_cast<const char*>(out), 32};
}

struct HelloFields {
  uint16_t version;
  std::string job_id;
  std::string nonce;
};

HelloFields ParseHello(const std::string& meta) {
  base::ByteReader r(meta, "test hello");
  HelloFields f;
  f.version = r.Get<uint16_t>("version");
  f.job_id = r.GetString("job id");
  f.nonce = Str(r.GetBytes(32, "nonce"));
  r.ExpectEnd();
  return f;
}

std::string HelloMeta(uint16_t version, const std::string& job_id, const std::string& nonce) {
  base::ByteWriter w;
  w.Put(version);
  w.PutString(job_id);
  w.PutBytes(std::as_bytes(std::span(nonce.data(), nonce.size())));
  return w.Take();
}

HandshakeCredentials Creds(std::string job, std::string secret) {
  return HandshakeCredentials{std::move(job), std::move(secret)};
}

struct CredentialCase {
  std::string name;
  HandshakeCredentials creds;
};

class HandshakeSuccessTest : public testing::TestWithParam<CredentialCase> {};

TEST_P(HandshakeSuccessTest, BothSidesAuthenticate) {
  const auto& creds = GetParam().creds;
  ClientHandshake client(creds);
  ServerHandshake server(creds);
  Message hello = Deliver(client.Hello());
  EXPECT_EQ(hello.header.type, msgtype::kHandshakeHello);
  Message challenge = Deliver(server.OnHello(hello));
  EXPECT_EQ(challenge.header.type, msgtype::kHandshakeChallenge);
  Message proof = Deliver(client.OnChallenge(challenge));
  EXPECT_EQ(proof.header.type, msgtype::kHandshakeProof);
  Message welcome = Deliver(server.OnProof(proof));
  EXPECT_EQ(welcome.header.type, msgtype::kHandshakeWelcome);
  EXPECT_NO_THROW(client.OnWelcome(welcome));
}

TEST_P(HandshakeSuccessTest, ProofsFollowTheDocumentedFormula) {
  const auto& creds = GetParam().creds;
  ClientHandshake client(creds);
  ServerHandshake server(creds);
  Message hello = Deliver(client.Hello());
  HelloFields fields = ParseHello(hello.meta);
  EXPECT_EQ(fields.version, kProtocolVersion);
  EXPECT_EQ(fields.job_id, creds.job_id);
  Message challenge = Deliver(server.OnHello(hello));
  ASSERT_EQ(challenge.meta.size(), 64u);
  std::string server_nonce = challenge.meta.substr(0, 32);
  EXPECT_EQ(challenge.meta.substr(32), DocumentedProof("tandem-server", creds.job_id, creds.secret,
                                                       fields.nonce, server_nonce));
  Message proof = Deliver(client.OnChallenge(challenge));
  EXPECT_EQ(proof.meta, DocumentedProof("tandem-client", creds.job_id, creds.secret, fields.nonce,
                                        server_nonce));
}

INSTANTIATE_TEST_SUITE_P(
    Credentials, HandshakeSuccessTest,
    testing::Values(CredentialCase{"plain", Creds("tandem", "s3cret")},
                    CredentialCase{"empty_secret", Creds("tandem", "")},
                    CredentialCase{"empty_job_id", Creds("", "k")},
                    CredentialCase{"longest_job_id", Creds(std::string(kMaxJobIdBytes, 'j'), "k")},
                    CredentialCase{"binary_secret", Creds("job-7", std::string("\0\xff\n x", 5))},
                    CredentialCase{"long_secret", Creds("job", std::string(1000, 'q'))}),
    [](const auto& tp) { return tp.param.name; });

TEST(HandshakeTest, ClientRejectsAServerWithAnotherSecret) {
  ClientHandshake client(Creds("job", "client-secret-xyz"));
  ServerHandshake server(Creds("job", "server-secret-abc"));
  Message challenge = Deliver(server.OnHello(Deliver(client.Hello())));
  try {
    client.OnChallenge(challenge);
    FAIL() << "expected AuthFailed";
  } catch (const AuthFailed& e) {
    EXPECT_THAT(e.what(), HasSubstr("server proof does not match"));
    EXPECT_THAT(e.what(), Not(HasSubstr("client-secret-xyz")));
    EXPECT_THAT(e.what(), Not(HasSubstr("server-secret-abc")));
  }
}

TEST(HandshakeTest, ServerRejectsAProofMadeWithAnotherSecret) {
  // A client that skips checking the server (a forger) still cannot pass:
  // it can only compute the client proof with the secret it has.
  ServerHandshake server(Creds("job", "right-secret"));
  std::string client_nonce(32, 'n');
  Message challenge = Deliver(server.OnHello(
      Frame(msgtype::kHandshakeHello, HelloMeta(kProtocolVersion, "job", client_nonce))));
  std::string forged = DocumentedProof("tandem-client", "job", "guessed-secret", client_nonce,
                                       challenge.meta.substr(0, 32));
  try {
    server.OnProof(Frame(msgtype::kHandshakeProof, forged));
    FAIL() << "expected AuthFailed";
  } catch (const AuthFailed& e) {
    EXPECT_THAT(e.what(), HasSubstr("client proof does not match: wrong TANDEM_SECRET?"));
    EXPECT_THAT(e.what(), Not(HasSubstr("right-secret")));
    EXPECT_THAT(e.what(), Not(HasSubstr("guessed-secret")));
  }
}

TEST(HandshakeTest, ServerAcceptsAProofMadeWithTheRightSecret) {
  // The counterpart of the test above: the same forger with the right secret
  // passes, so the rejection above is due to the secret alone.
  ServerHandshake server(Creds("job", "right-secret"));
  std::string client_nonce(32, 'n');
  Message challenge = Deliver(server.OnHello(
      Frame(msgtype::kHandshakeHello, HelloMeta(kProtocolVersion, "job", client_nonce))));
  std::string proof = DocumentedProof("tandem-client", "job", "right-secret", client_nonce,
                                      challenge.meta.substr(0, 32));
  Message welcome = Deliver(server.OnProof(Frame(msgtype::kHandshakeProof, proof)));
  EXPECT_EQ(welcome.header.type, msgtype::kHandshakeWelcome);
  EXPECT_TRUE(welcome.meta.empty());
}

TEST(HandshakeTest, ServerRejectsAnotherJob) {
  ClientHandshake client(Creds("a", "same-secret"));
  ServerHandshake server(Creds("b", "same-secret"));
  try {
    server.OnHello(Deliver(client.Hello()));
    FAIL() << "expected AuthFailed";
  } catch (const AuthFailed& e) {
    EXPECT_THAT(e.what(), HasSubstr("job id 'a' differs from ours 'b'"));
    EXPECT_THAT(e.what(), Not(HasSubstr("same-secret")));
  }
}

TEST(HandshakeTest, EscapesAPeersJobIdInErrors) {
  ServerHandshake server(Creds("ours", "k"));
  try {
    server.OnHello(Frame(msgtype::kHandshakeHello,
                         HelloMeta(kProtocolVersion, "evil\n\x1b[2J'", std::string(32, 'n'))));
    FAIL() << "expected AuthFailed";
  } catch (const AuthFailed& e) {
    EXPECT_THAT(e.what(), HasSubstr("'evil\\x0a\\x1b[2J\\x27'"));
  }
}

TEST(HandshakeTest, ReplayedProofFailsAgainstAFreshServerNonce) {
  auto creds = Creds("job", "secret");
  ClientHandshake client(creds);
  ServerHandshake server(creds);
  Message hello = Deliver(client.Hello());
  Message challenge = Deliver(server.OnHello(hello));
  Message proof = Deliver(client.OnChallenge(challenge));
  server.OnProof(proof);

  // An eavesdropper replays the recorded client frames to a new connection.
  ServerHandshake replayed(creds);
  Message fresh_challenge = Deliver(replayed.OnHello(hello));
  EXPECT_NE(fresh_challenge.meta, challenge.meta) << "each connection draws its own nonce";
  EXPECT_THROW(replayed.OnProof(proof), AuthFailed);
}

TEST(HandshakeTest, ReplayedChallengeFailsAgainstAFreshClientNonce) {
  auto creds = Creds("job", "secret");
  ClientHandshake client(creds);
  ServerHandshake server(creds);
  Message challenge = Deliver(server.OnHello(Deliver(client.Hello())));
  Deliver(client.OnChallenge(challenge));

  // A fake server replays a recorded challenge to a new client.
  ClientHandshake victim(creds);
  victim.Hello();
  EXPECT_THROW(victim.OnChallenge(challenge), AuthFailed);
}

TEST(HandshakeTest, ServerProofCannotBeReflectedAsAClientProof) {
  // The attacker sends the server's own proof back; the labels make the two
  // proofs differ even over the same nonces.
  ServerHandshake server(Creds("job", "secret"));
  Message challenge = Deliver(server.OnHello(
      Frame(msgtype::kHandshakeHello, HelloMeta(kProtocolVersion, "job", std::string(32, 'n')))));
  EXPECT_THROW(server.OnProof(Frame(msgtype::kHandshakeProof, challenge.meta.substr(32))),
               AuthFailed);
}

TEST(HandshakeTest, NoncesAreFreshPerConnection) {
  auto creds = Creds("job", "secret");
  ClientHandshake a(creds);
  ClientHandshake b(creds);
  EXPECT_NE(ParseHello(a.Hello().meta).nonce, ParseHello(b.Hello().meta).nonce);
}

TEST(HandshakeTest, RejectsAJobIdLongerThanTheLimit) {
  EXPECT_THROW(ClientHandshake(Creds(std::string(kMaxJobIdBytes + 1, 'x'), "")), InvalidArgument);
  EXPECT_THROW(ServerHandshake(Creds(std::string(kMaxJobIdBytes + 1, 'x'), "")), InvalidArgument);
}

TEST(HandshakeTest, LimitsAllowNoPayloadAndLittleMetadata) {
  WireLimits limits = HandshakeLimits();
  EXPECT_EQ(limits.max_payload_bytes, 0u);
  EXPECT_GE(limits.max_meta_bytes,
            HelloMeta(1, std::string(kMaxJobIdBytes, 'j'), std::string(32, 'n')).size());
  EXPECT_LE(limits.max_meta_bytes, 4096u);
}

// Malformed hellos: each must be a ProtocolError naming what was wrong.
struct BadHello {
  std::string name;
  std::function<Message()> make;
  std::string expected;
};

Message GoodHello() {
  return Frame(msgtype::kHandshakeHello, HelloMeta(kProtocolVersion, "job", std::string(32, 'n')));
}

std::vector<BadHello> BadHellos() {
  return {
      {"wrong_type",
       [] {
         Message m = GoodHello();
         m.header.type = msgtype::kHandshakeProof;
         return m;
       },
       "expected a handshake hello (type 1), got a handshake proof (type 3)"},
      {"upper_layer_type",
       [] {
         Message m = GoodHello();
         m.header.type = msgtype::kKvFirst;
         return m;
       },
       "got a kv message 128"},
      {"other_version",
       [] { return Frame(msgtype::kHandshakeHello, HelloMeta(2, "job", std::string(32, 'n'))); },
       "client speaks protocol version 2, this build speaks 1"},
      {"empty_meta", [] { return Frame(msgtype::kHandshakeHello, ""); },
       "truncated at field 'protocol version'"},
      {"short_nonce",
       [] { return Frame(msgtype::kHandshakeHello, HelloMeta(kProtocolVersion, "job", "short")); },
       "truncated at field 'client nonce'"},
      {"trailing_bytes",
       [] {
         Message m = GoodHello();
         m.meta += "x";
         return m;
       },
       "1 unexpected trailing bytes"},
      {"huge_job_id_length",
       [] {
         base::ByteWriter w;
         w.Put(kProtocolVersion);
         w.Put(uint32_t{0xFFFFFFF0});
         return Frame(msgtype::kHandshakeHello, w.Take());
       },
       "field 'job id' claims 4294967280 bytes, limit is 256"},
      {"flags",
       [] {
         Message m = GoodHello();
         m.header.flags = flags::kError;
         return m;
       },
       "has flags 0x2, expected none"},
      {"sender",
       [] {
         Message m = GoodHello();
         m.header.sender = 3;
         return m;
       },
       "names sender 3 and recipient -1, expected -1 and -1"},
      {"payload",
       [] {
         Message m = GoodHello();
         m.header.payload_length = 4;
         return m;
       },
       "carries a payload of 4 bytes, expected none"},
  };
}

class MalformedHelloTest : public testing::TestWithParam<BadHello> {};

TEST_P(MalformedHelloTest, IsAProtocolError) {
  ServerHandshake server(Creds("job", "secret"));
  try {
    server.OnHello(GetParam().make());
    FAIL() << "expected a ProtocolError";
  } catch (const ProtocolError& e) {
    EXPECT_THAT(e.what(), HasSubstr(GetParam().expected));
  }
  // Once failed, the handshake stays failed, even for a valid hello.
  EXPECT_THROW(server.OnHello(GoodHello()), ProtocolError);
}

INSTANTIATE_TEST_SUITE_P(Hellos, MalformedHelloTest, testing::ValuesIn(BadHellos()),
                         [](const auto& tp) { return tp.param.name; });

// Frames of the right type in the wrong place, or of the wrong shape, at every
// other step.
struct Misstep {
  std::string name;
  std::function<void()> run;
  std::string expected;
};

std::vector<Misstep> Missteps() {
  auto creds = Creds("job", "secret");
  return {
      {"server_proof_before_hello",
       [creds] {
         ServerHandshake s(creds);
         s.OnProof(Frame(msgtype::kHandshakeProof, std::string(32, 'p')));
       },
       "has not received the hello yet"},
      {"server_second_hello",
       [creds] {
         ServerHandshake s(creds);
         s.OnHello(GoodHello());
         s.OnHello(GoodHello());
       },
       "a second hello is out of order"},
      {"server_hello_where_proof_due",
       [creds] {
         ServerHandshake s(creds);
         s.OnHello(GoodHello());
         s.OnProof(GoodHello());
       },
       "expected a handshake proof (type 3), got a handshake hello (type 1)"},
      {"server_short_proof",
       [creds] {
         ServerHandshake s(creds);
         s.OnHello(GoodHello());
         s.OnProof(Frame(msgtype::kHandshakeProof, std::string(31, 'p')));
       },
       "truncated at field 'client proof'"},
      {"client_challenge_before_hello",
       [creds] {
         ClientHandshake c(creds);
         c.OnChallenge(Frame(msgtype::kHandshakeChallenge, std::string(64, 'c')));
       },
       "has not sent its hello yet"},
      {"client_hello_twice",
       [creds] {
         ClientHandshake c(creds);
         c.Hello();
         c.Hello();
       },
       "was already started"},
      {"client_welcome_before_challenge",
       [creds] {
         ClientHandshake c(creds);
         c.Hello();
         c.OnWelcome(Frame(msgtype::kHandshakeWelcome, ""));
       },
       "has not proved itself yet"},
      {"client_welcome_where_challenge_due",
       [creds] {
         ClientHandshake c(creds);
         c.Hello();
         c.OnChallenge(Frame(msgtype::kHandshakeWelcome, ""));
       },
       "expected a handshake challenge (type 2), got a handshake welcome (type 4)"},
      {"client_long_challenge",
       [creds] {
         ClientHandshake c(creds);
         c.Hello();
         c.OnChallenge(Frame(msgtype::kHandshakeChallenge, std::string(65, 'c')));
       },
       "1 unexpected trailing bytes"},
      {"client_welcome_with_meta",
       [creds] {
         ClientHandshake c(creds);
         ServerHandshake s(creds);
         Message challenge = Deliver(s.OnHello(Deliver(c.Hello())));
         s.OnProof(Deliver(c.OnChallenge(challenge)));
         c.OnWelcome(Frame(msgtype::kHandshakeWelcome, "hi"));
       },
       "2 unexpected trailing bytes"},
      {"client_after_failure",
       [creds] {
         ClientHandshake c(creds);
         c.Hello();
         try {
           c.OnChallenge(Frame(msgtype::kHandshakeChallenge, std::string(64, 'c')));
         } catch (const AuthFailed&) {
         }
         c.OnWelcome(Frame(msgtype::kHandshakeWelcome, ""));
       },
       "failed earlier"},
      {"client_second_welcome",
       [creds] {
         ClientHandshake c(creds);
         ServerHandshake s(creds);
         Message challenge = Deliver(s.OnHello(Deliver(c.Hello())));
         Message welcome = Deliver(s.OnProof(Deliver(c.OnChallenge(challenge))));
         c.OnWelcome(welcome);
         c.OnWelcome(welcome);
       },
       "a second welcome is out of order"},
  };
}

class HandshakeMisstepTest : public testing::TestWithParam<Misstep> {};

TEST_P(HandshakeMisstepTest, IsAProtocolError) {
  try {
    GetParam().run();
    FAIL() << "expected a ProtocolError";
  } catch (const ProtocolError& e) {
    EXPECT_THAT(e.what(), HasSubstr(GetParam().expected));
  }
}

INSTANTIATE_TEST_SUITE_P(Steps, HandshakeMisstepTest, testing::ValuesIn(Missteps()),
                         [](const auto& tp) { return tp.param.name; });

}  // namespace
}  // namespace tandem::net
