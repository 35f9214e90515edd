// TcpTransport with TransportOptions::tls (docs/transport.md, "TLS"): messages
// of every size arrive intact, into posted buffers too; certificates of a
// CA the other side does not trust are refused on both sides; a TLS node and
// a plaintext node refuse each other naming the mismatch, in both
// directions and without waiting for a timeout; and the bytes on the wire
// are not the plaintext (a recording relay sits between the two transports).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "net/socket_address.h"
#include "net/tcp_transport.h"
#include "net/tls_context.h"
#include "support/log_capture.h"
#include "tandem/error.h"
#include "tls_material.h"

namespace tandem::net {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using tandem::testing::LogCapture;
using testing::TempDir;
using testing::TlsMaterial;

constexpr auto kPatience = 30s;
constexpr uint16_t kType = msgtype::kCollectiveFirst + 3;

// A message as received: copies of what arrived.
struct Received {
  uint64_t request = 0;
  std::string meta;
  std::vector<std::byte> payload;
  bool posted = false;
};

// Collects what a transport delivers. With `post`, payloads land in buffers
// the test allocated (the posted-receive path).
class Inbox : public TransportHandler {
 public:
  explicit Inbox(bool post = false) : post_(post) {}

  void OnConnected(ConnectionId id, const PeerInfo&) override {
    std::lock_guard lock(mu_);
    connected_.push_back(id);
    cv_.notify_all();
  }
  std::span<std::byte> PayloadDestination(ConnectionId, const Header& h,
                                          const std::string&) override {
    if (!post_) return {};
    std::lock_guard lock(mu_);
    auto& buffer = posted_[h.request_id];
    buffer.assign(h.payload_length, std::byte{0});
    return buffer;
  }
  void OnMessage(ConnectionId, Message&& m) override {
    std::lock_guard lock(mu_);
    Received r;
    r.request = m.header.request_id;
    r.meta = m.meta;
    r.payload.assign(m.payload.bytes.begin(), m.payload.bytes.end());
    r.posted = m.payload.in_posted_buffer();
    if (r.posted) posted_.erase(m.header.request_id);
    messages_.push_back(std::move(r));
    cv_.notify_all();
  }
  void OnDisconnected(ConnectionId, const std::string& reason) override {
    std::lock_guard lock(mu_);
    disconnected_.push_back(reason);
    cv_.notify_all();
  }

  bool WaitMessages(size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kPatience, [&] { return messages_.size() >= n; });
  }
  bool WaitConnected(size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kPatience, [&] { return connected_.size() >= n; });
  }
  std::vector<Received> Messages() {
    std::lock_guard lock(mu_);
    return messages_;
  }
  ConnectionId FirstConnection() {
    std::lock_guard lock(mu_);
    return connected_.at(0);
  }
  size_t ConnectedCount() {
    std::lock_guard lock(mu_);
    return connected_.size();
  }

 private:
  const bool post_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ConnectionId> connected_;
  std::map<uint64_t, std::vector<std::byte>> posted_;
  std::vector<Received> messages_;
  std::vector<std::string> disconnected_;
};

std::vector<std::byte> Pattern(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<std::byte>(x >> 32);
  }
  return v;
}

TransportOptions Options(std::shared_ptr<const TlsContext> tls) {
  TransportOptions o;
  o.job_id = "tls-test-job";
  o.secret = "tls-test-secret";
  o.tls = std::move(tls);
  return o;
}

std::unique_ptr<TcpTransport> MakeTransport(std::shared_ptr<const TlsContext> tls,
                                            TransportHandler* h, LogCapture& log) {
  return std::make_unique<TcpTransport>(Options(std::move(tls)), h, log.logger(),
                                        TcpTuning{10ms, 200ms, 0});
}

// --- messages arrive intact ----------------------------------------------------

// (payload bytes, messages, spans per message, posted receive)
using IntactParam = std::tuple<size_t, int, int, bool>;

class TlsMessagesTest : public ::testing::TestWithParam<IntactParam> {
 protected:
  static void SetUpTestSuite() { material_ = new TlsMaterial("intact-ca"); }
  static void TearDownTestSuite() {
    delete material_;
    material_ = nullptr;
  }
  static TlsMaterial* material_;
};
TlsMaterial* TlsMessagesTest::material_ = nullptr;

TEST_P(TlsMessagesTest, ArriveIntactAndInOrderBothWays) {
  const size_t size = std::get<0>(GetParam());
  const int count = std::get<1>(GetParam());
  const int spans = std::get<2>(GetParam());
  const bool post = std::get<3>(GetParam());
  LogCapture log;
  Inbox server_inbox(post);
  Inbox client_inbox(post);
  auto server = MakeTransport(material_->Context("server"), &server_inbox, log);
  auto client = MakeTransport(material_->Context("client"), &client_inbox, log);
  Endpoint bound = server->Listen({"127.0.0.1", 0});
  ConnectionId to_server = client->Connect(bound, 10s);
  ASSERT_TRUE(server_inbox.WaitConnected(1));
  ConnectionId to_client = server_inbox.FirstConnection();

  // Every message differs; each is split into `spans` spans of the payload.
  std::vector<std::vector<std::byte>> payloads;
  for (int i = 0; i < count; ++i) payloads.push_back(Pattern(size, i + 1));
  std::atomic<int> sent{0};
  auto send_all = [&](Transport& t, ConnectionId id) {
    for (int i = 0; i < count; ++i) {
      OutgoingMessage m;
      m.header.type = kType;
      m.header.request_id = static_cast<uint64_t>(i);
      m.meta = "meta-" + std::to_string(i);
      const auto& p = payloads[i];
      size_t step = std::max<size_t>(1, (p.size() + spans - 1) / spans);
      for (size_t at = 0; at < p.size(); at += step) {
        m.payload.push_back(std::span(p.data() + at, std::min(step, p.size() - at)));
      }
      m.on_sent = [&sent](std::exception_ptr e) {
        if (!e) sent.fetch_add(1);
      };
      t.Send(id, std::move(m));
    }
  };
  send_all(*client, to_server);
  send_all(*server, to_client);
  ASSERT_TRUE(server_inbox.WaitMessages(count));
  ASSERT_TRUE(client_inbox.WaitMessages(count));
  for (Inbox* inbox : {&server_inbox, &client_inbox}) {
    std::vector<Received> got = inbox->Messages();
    ASSERT_EQ(got.size(), static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      EXPECT_EQ(got[i].request, static_cast<uint64_t>(i));
      EXPECT_EQ(got[i].meta, "meta-" + std::to_string(i));
      ASSERT_EQ(got[i].payload.size(), size) << "message " << i;
      EXPECT_TRUE(got[i].payload == payloads[i]) << "payload of message " << i << " differs";
      EXPECT_EQ(got[i].posted, post && size > 0);
    }
  }
  client->Shutdown();
  server->Shutdown();
  EXPECT_EQ(sent.load(), 2 * count);
}

INSTANTIATE_TEST_SUITE_P(Sizes, TlsMessagesTest,
                         ::testing::Combine(::testing::Values(size_t{0}, size_t{1}, size_t{4096},
                                                              size_t{16383}, size_t{16384},
                                                              size_t{100003}, size_t{1} << 20,
                                                              size_t{3} << 20),
                                            ::testing::Values(1, 5), ::testing::Values(1, 3),
                                            ::testing::Bool()),
                         [](const auto& param_info) {
                           return "Bytes" + std::to_string(std::get<0>(param_info.param)) + "x" +
                                  std::to_string(std::get<1>(param_info.param)) + "Spans" +
                                  std::to_string(std::get<2>(param_info.param)) +
                                  (std::get<3>(param_info.param) ? "Posted" : "Owned");
                         });

// Several threads send at once on one connection (the writer is whichever
// thread finds the queue idle, or the loop): every message arrives, and each
// thread's messages in its order.
class TlsConcurrentSendersTest : public ::testing::TestWithParam<std::tuple<int, size_t>> {};

TEST_P(TlsConcurrentSendersTest, EveryMessageArrivesInEachSendersOrder) {
  const int threads = std::get<0>(GetParam());
  const size_t size = std::get<1>(GetParam());
  constexpr int kPerThread = 40;
  TlsMaterial material("concurrent-ca");
  LogCapture log;
  Inbox server_inbox;
  Inbox client_inbox;
  auto server = MakeTransport(material.Context("server"), &server_inbox, log);
  auto client = MakeTransport(material.Context("client"), &client_inbox, log);
  ConnectionId id = client->Connect(server->Listen({"127.0.0.1", 0}), 10s);
  std::vector<std::vector<std::byte>> payloads;
  for (int t = 0; t < threads; ++t) payloads.push_back(Pattern(size, 100 + t));
  std::vector<std::thread> senders;
  for (int t = 0; t < threads; ++t) {
    senders.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        OutgoingMessage m;
        m.header.type = kType;
        m.header.request_id = static_cast<uint64_t>(t) << 32 | static_cast<uint64_t>(i);
        m.payload.push_back(payloads[t]);
        if (i % 2 == 0) m.on_sent = [](std::exception_ptr) {};  // both writer paths
        client->Send(id, std::move(m));
      }
    });
  }
  for (auto& s : senders) s.join();
  ASSERT_TRUE(server_inbox.WaitMessages(static_cast<size_t>(threads * kPerThread)));
  std::vector<int> next(threads, 0);
  for (const Received& r : server_inbox.Messages()) {
    int t = static_cast<int>(r.request >> 32);
    int i = static_cast<int>(r.request & 0xffffffff);
    ASSERT_LT(t, threads);
    EXPECT_EQ(i, next[t]++) << "thread " << t;
    EXPECT_TRUE(r.payload == payloads[t]) << "thread " << t << " message " << i;
  }
  client->Shutdown();
  server->Shutdown();
}

INSTANTIATE_TEST_SUITE_P(Threads, TlsConcurrentSendersTest,
                         ::testing::Combine(::testing::Values(2, 4),
                                            ::testing::Values(size_t{100}, size_t{70000})));

// --- certificates of an untrusted CA -------------------------------------------

enum class Foreign { kClientCertificate, kServerCertificate, kBoth };

struct ForeignCase {
  Foreign which;
  std::string name;
};

class TlsForeignCaTest : public ::testing::TestWithParam<ForeignCase> {};

// A CA file trusting both CAs: the side holding it accepts either.
std::string Bundle(const TlsMaterial& a, const TlsMaterial& b, const TempDir& dir) {
  std::string path = (dir.path() / "bundle.pem").string();
  WriteTextFile(path, a.ca().CertificatePem() + b.ca().CertificatePem(),
                std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  return path;
}

TEST_P(TlsForeignCaTest, IsRefusedOnBothSidesNamingTheCertificateProblem) {
  TlsMaterial trusted("trusted-ca");
  TlsMaterial other("other-ca");
  TempDir dir;
  const std::string bundle = Bundle(trusted, other, dir);
  TlsFiles server_files = trusted.Files("server");
  TlsFiles client_files = trusted.Files("client");
  switch (GetParam().which) {
    case Foreign::kClientCertificate:  // the server trusts only its CA
      client_files = other.Files("client");
      client_files.ca = bundle;
      break;
    case Foreign::kServerCertificate:  // the client trusts only its CA
      server_files = other.Files("server");
      server_files.ca = bundle;
      break;
    case Foreign::kBoth:
      client_files = other.Files("client");
      break;
  }
  LogCapture server_log;
  LogCapture client_log;
  Inbox server_inbox;
  Inbox client_inbox;
  auto server = MakeTransport(TlsContext::Load(server_files), &server_inbox, server_log);
  auto client = MakeTransport(TlsContext::Load(client_files), &client_inbox, client_log);
  Endpoint bound = server->Listen({"127.0.0.1", 0});
  const std::string server_name = bound.ToString();
  try {
    client->Connect(bound, 10s);
    FAIL() << "a connection with a certificate of an untrusted CA was accepted";
  } catch (const AuthFailed& e) {
    EXPECT_THAT(e.what(), HasSubstr(server_name));
    if (GetParam().which == Foreign::kClientCertificate) {
      EXPECT_THAT(e.what(), HasSubstr("the peer refused our TLS certificate"));
      EXPECT_THAT(e.what(), HasSubstr("unknown CA"));
    } else {
      EXPECT_THAT(e.what(), HasSubstr("TLS certificate does not verify against our CA"));
    }
  }
  // The server's side: a warning naming the client's address and the cause.
  const std::string server_says = GetParam().which == Foreign::kClientCertificate
                                      ? "TLS certificate does not verify against our CA"
                                      : "the peer refused our TLS certificate";
  EXPECT_TRUE(server_log.WaitFor(server_says)) << server_log.Text();
  EXPECT_THAT(server_log.Text(), HasSubstr("dropped connection"));
  EXPECT_THAT(server_log.Text(), HasSubstr("127.0.0.1:"));
  EXPECT_EQ(server_inbox.ConnectedCount(), 0u);
  EXPECT_EQ(client_inbox.ConnectedCount(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TlsForeignCaTest,
    ::testing::Values(ForeignCase{Foreign::kClientCertificate, "ClientCertificate"},
                      ForeignCase{Foreign::kServerCertificate, "ServerCertificate"},
                      ForeignCase{Foreign::kBoth, "BothFromDifferentCas"}),
    [](const auto& param_info) { return param_info.param.name; });

// --- TLS against plaintext -------------------------------------------------------

class TlsMismatchTest : public ::testing::TestWithParam<bool> {};  // true: TLS client

TEST_P(TlsMismatchTest, IsRefusedBothWaysNamingThePeerAndTheMismatchWithoutWaiting) {
  const bool tls_client = GetParam();
  TlsMaterial material("mismatch-ca");
  auto tls = material.Context("node");
  LogCapture server_log;
  LogCapture client_log;
  Inbox server_inbox;
  Inbox client_inbox;
  auto server = MakeTransport(tls_client ? nullptr : tls, &server_inbox, server_log);
  auto client = MakeTransport(tls_client ? tls : nullptr, &client_inbox, client_log);
  Endpoint bound = server->Listen({"127.0.0.1", 0});
  auto started = std::chrono::steady_clock::now();
  try {
    client->Connect(bound, 10s);
    FAIL() << "a TLS and a plaintext node connected";
  } catch (const ProtocolError& e) {
    EXPECT_THAT(e.what(), HasSubstr(bound.ToString()));
    EXPECT_THAT(e.what(), HasSubstr("TANDEM_TLS=1"));
    EXPECT_THAT(e.what(), HasSubstr("every process of a job must have the same TANDEM_TLS"));
    EXPECT_THAT(e.what(), tls_client ? HasSubstr("without answering our TLS hello")
                                     : HasSubstr("answered with TLS"));
  }
  // Refused at once, not by the 10 s handshake deadline.
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
  const std::string server_says = tls_client ? "opened with a TLS hello" : "sent plaintext tandem";
  EXPECT_TRUE(server_log.WaitFor(server_says)) << server_log.Text();
  EXPECT_THAT(server_log.Text(), HasSubstr("dropped connection from 127.0.0.1:"));
  EXPECT_EQ(server_inbox.ConnectedCount(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Directions, TlsMismatchTest, ::testing::Bool(),
                         [](const auto& param_info) {
                           return param_info.param ? std::string("TlsClientPlaintextServer")
                                                   : std::string("PlaintextClientTlsServer");
                         });

// --- what the wire carries --------------------------------------------------------

// Forwards one TCP connection to `upstream` and records every byte that
// passes, in both directions. Thread-safety: Recorded() from any thread.
class RecordingRelay {
 public:
  explicit RecordingRelay(Endpoint upstream) : upstream_(std::move(upstream)) {
    listener_ = ListenOn({"127.0.0.1", 0}, &bound_);
    thread_ = std::thread([this] { Run(); });
  }
  ~RecordingRelay() {
    stop_.store(true);
    thread_.join();
  }
  const Endpoint& address() const { return bound_; }
  std::string Recorded() {
    std::lock_guard lock(mu_);
    return recorded_;
  }

 private:
  void Run() {
    pollfd lp{listener_.get(), POLLIN, 0};
    while (!stop_.load() && ::poll(&lp, 1, 20) <= 0) {
    }
    if (stop_.load()) return;
    base::UniqueFd down(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK));
    base::UniqueFd up;
    auto r = Resolve(upstream_, false);
    if (!down || r.addresses.empty() ||
        ConnectBefore(r.addresses[0], std::chrono::steady_clock::now() + 10s, &up) != 0) {
      return;
    }
    pollfd fds[2] = {{down.get(), POLLIN, 0}, {up.get(), POLLIN, 0}};
    char buf[65536];
    while (!stop_.load()) {
      if (::poll(fds, 2, 20) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
        if (n <= 0) return;  // either side gone: the relay ends both
        {
          std::lock_guard lock(mu_);
          recorded_.append(buf, static_cast<size_t>(n));
        }
        int to = fds[1 - i].fd;
        for (ssize_t off = 0; off < n;) {
          ssize_t w = ::send(to, buf + off, static_cast<size_t>(n - off), MSG_NOSIGNAL);
          if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            pollfd wp{to, POLLOUT, 0};
            ::poll(&wp, 1, 100);
            continue;
          }
          if (w <= 0) return;
          off += w;
        }
      }
    }
  }

  Endpoint upstream_;
  Endpoint bound_;
  base::UniqueFd listener_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::string recorded_;
  std::thread thread_;
};

class TlsWireTest : public ::testing::TestWithParam<bool> {};  // true: TLS

TEST_P(TlsWireTest, TheRelayedBytesHoldThePlaintextOnlyWithoutTls) {
  const bool use_tls = GetParam();
  TlsMaterial material("wire-ca");
  std::shared_ptr<const TlsContext> tls = use_tls ? material.Context("node") : nullptr;
  LogCapture log;
  Inbox server_inbox;
  Inbox client_inbox;
  auto server = MakeTransport(tls, &server_inbox, log);
  auto client = MakeTransport(tls, &client_inbox, log);
  RecordingRelay relay(server->Listen({"127.0.0.1", 0}));
  ConnectionId id = client->Connect(relay.address(), 10s);

  const std::string canary = "PLAINTEXT-CANARY-0123456789-";
  std::string text;
  for (int i = 0; i < 3000; ++i) text += canary;  // ~84 KiB: gathered and in-place records
  std::string small = "small-" + canary;
  for (const std::string* body : {&small, &text}) {
    OutgoingMessage m;
    m.header.type = kType;
    m.meta = "meta-" + canary;
    m.payload.push_back(std::as_bytes(std::span(body->data(), body->size())));
    client->Send(id, std::move(m));
  }
  ASSERT_TRUE(server_inbox.WaitMessages(2));
  std::vector<Received> got = server_inbox.Messages();
  EXPECT_EQ(
      std::string(reinterpret_cast<const char*>(got[1].payload.data()), got[1].payload.size()),
      text);
  const std::string wire = relay.Recorded();
  EXPECT_GT(wire.size(), text.size());
  for (const std::string& secret : {canary, std::string("tls-test-job")}) {
    if (use_tls) {
      EXPECT_EQ(wire.find(secret), std::string::npos) << "'" << secret << "' crossed in the clear";
    } else {
      EXPECT_NE(wire.find(secret), std::string::npos) << "the relay did not record the stream";
    }
  }
  client->Shutdown();
  server->Shutdown();
}

INSTANTIATE_TEST_SUITE_P(Modes, TlsWireTest, ::testing::Bool(), [](const auto& param_info) {
  return param_info.param ? std::string("Tls") : std::string("Plaintext");
});

}  // namespace
}  // namespace tandem::net
