// The Transport contract, checked against every implementation: TCP over
// IPv4 and IPv6 loopback, and the in-process transport.
#include "net/transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/logger.h"
#include "net/hmac_handshake.h"
#include "net/inproc_transport.h"
#include "net/socket_address.h"
#include "net/tcp_transport.h"
#include "net/tls_material.h"
#include "support/log_capture.h"
#include "tandem/error.h"

namespace tandem::net {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

// Long enough never to fire on a loaded machine; only a hang reaches it.
constexpr auto kPatience = 30s;
constexpr uint16_t kTestType = msgtype::kClusterFirst + 7;

// kTcpTls: TCP over IPv4 with TANDEM_TLS=1 (docs/transport.md, "TLS").
enum class Kind { kTcpV4, kTcpV6, kTcpTls, kInProc };

std::string KindName(Kind k) {
  switch (k) {
    case Kind::kTcpV4:
      return "TcpV4";
    case Kind::kTcpV6:
      return "TcpV6";
    case Kind::kTcpTls:
      return "TcpTls";
    case Kind::kInProc:
      return "InProc";
  }
  return "?";
}

bool Ipv6LoopbackAvailable() {
  int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

std::vector<std::byte> Pattern(size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::byte>((i * 131 + seed * 7 + i / 251) & 0xff);
  return v;
}

// Records every event; waits for conditions with a condition variable.
class Recorder : public TransportHandler {
 public:
  struct Event {
    ConnectionId id;
    Message msg;
  };

  void OnConnected(ConnectionId id, const PeerInfo& peer) override {
    std::lock_guard lock(mu_);
    connected_.emplace_back(id, peer);
    callback_threads_.insert(std::this_thread::get_id());
    cv_.notify_all();
  }
  std::span<std::byte> PayloadDestination(ConnectionId id, const Header& h,
                                          const std::string& meta) override {
    std::lock_guard lock(mu_);
    destination_calls_++;
    return destination_ ? destination_(id, h, meta) : std::span<std::byte>();
  }
  void OnMessage(ConnectionId id, Message&& msg) override {
    if (on_message_) on_message_(id, msg);
    std::lock_guard lock(mu_);
    callback_threads_.insert(std::this_thread::get_id());
    messages_.push_back(Event{id, std::move(msg)});
    cv_.notify_all();
  }
  void OnDisconnected(ConnectionId id, const std::string& reason) override {
    std::lock_guard lock(mu_);
    disconnected_.emplace_back(id, reason);
    cv_.notify_all();
  }

  // Waits until `pred` holds (called under the lock); false on timeout.
  template <typename Pred>
  bool WaitFor(Pred pred) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kPatience, [&] { return pred(); });
  }
  bool WaitMessages(size_t n) {
    return WaitFor([&] { return messages_.size() >= n; });
  }
  bool WaitConnected(size_t n) {
    return WaitFor([&] { return connected_.size() >= n; });
  }
  bool WaitDisconnected(size_t n) {
    return WaitFor([&] { return disconnected_.size() >= n; });
  }

  // Set before the transport delivers anything.
  std::function<std::span<std::byte>(ConnectionId, const Header&, const std::string&)> destination_;
  std::function<void(ConnectionId, Message&)> on_message_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<ConnectionId, PeerInfo>> connected_;
  std::vector<Event> messages_;
  std::vector<std::pair<ConnectionId, std::string>> disconnected_;
  std::set<std::thread::id> callback_threads_;
  int destination_calls_ = 0;
};

using tandem::testing::LogCapture;

TransportOptions Options(std::string secret = "s3cret", std::string job = "job-a") {
  TransportOptions o;
  o.secret = std::move(secret);
  o.job_id = std::move(job);
  return o;
}

OutgoingMessage Msg(uint64_t request, std::string meta = {},
                    std::vector<std::span<const std::byte>> payload = {},
                    std::function<void(std::exception_ptr)> on_sent = nullptr) {
  OutgoingMessage m;
  m.header.type = kTestType;
  m.header.request_id = request;
  m.meta = std::move(meta);
  m.payload = std::move(payload);
  m.on_sent = std::move(on_sent);
  return m;
}

// Builds transports of one kind and knows its addresses.
class Net {
 public:
  explicit Net(Kind kind) : kind_(kind) {
    if (kind == Kind::kTcpTls) {
      tls_material_ = std::make_unique<testing::TlsMaterial>("transport-test-ca");
      tls_ = tls_material_->Context("node");
    }
  }

  std::unique_ptr<Transport> Make(TransportHandler* h, TransportOptions o = Options()) {
    if (kind_ == Kind::kInProc) {
      return std::make_unique<InProcTransport>(network_, std::move(o), h, log_.logger());
    }
    o.tls = tls_;
    return std::make_unique<TcpTransport>(std::move(o), h, log_.logger(),
                                          TcpTuning{10ms, 200ms, 0});
  }
  Endpoint Address(uint16_t port = 0) const {
    switch (kind_) {
      case Kind::kTcpV4:
      case Kind::kTcpTls:
        return {"127.0.0.1", port};
      case Kind::kTcpV6:
        return {"::1", port};
      case Kind::kInProc:
        return {"node-a", port};
    }
    return {};
  }
  // A port nobody listens on (for TCP, one the kernel just handed out).
  uint16_t FreePort() const {
    if (kind_ == Kind::kInProc) return 7;
    Endpoint bound;
    base::UniqueFd fd = ListenOn(Address(0), &bound);
    return bound.port;
  }
  bool is_tcp() const { return kind_ != Kind::kInProc; }
  LogCapture& log() { return log_; }

 private:
  Kind kind_;
  InProcNetwork network_;
  LogCapture log_;
  std::unique_ptr<testing::TlsMaterial> tls_material_;  // kTcpTls only
  std::shared_ptr<const TlsContext> tls_;
};

// A listening server and a connected client. Handlers are declared before
// the transports, so the transports go first on destruction.
struct Pair {
  Recorder server_rec;
  Recorder client_rec;
  std::unique_ptr<Transport> server;
  std::unique_ptr<Transport> client;
  Endpoint bound;
  ConnectionId client_conn = 0;
  ConnectionId server_conn = 0;
};

class TransportTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Kind::kTcpV6 && !Ipv6LoopbackAvailable()) {
      GTEST_SKIP() << "::1 is not available on this host";
    }
    net_ = std::make_unique<Net>(GetParam());
  }

  // `prepare` may install handler hooks before any connection exists.
  std::unique_ptr<Pair> Connected(std::function<void(Pair&)> prepare = nullptr) {
    auto p = std::make_unique<Pair>();
    if (prepare) prepare(*p);
    p->server = net_->Make(&p->server_rec);
    p->client = net_->Make(&p->client_rec);
    p->bound = p->server->Listen(net_->Address());
    p->client_conn = p->client->Connect(p->bound, 10s);
    EXPECT_TRUE(p->server_rec.WaitConnected(1));
    std::lock_guard lock(p->server_rec.mu_);
    p->server_conn = p->server_rec.connected_.at(0).first;
    return p;
  }

  std::unique_ptr<Net> net_;
};

TEST_P(TransportTest, ConnectRunsHandshakeAndReportsBothPeers) {
  auto p = Connected();
  EXPECT_NE(p->bound.port, 0);
  // Connect returns only after the client's OnConnected ran.
  {
    std::lock_guard lock(p->client_rec.mu_);
    ASSERT_EQ(p->client_rec.connected_.size(), 1u);
    EXPECT_EQ(p->client_rec.connected_[0].first, p->client_conn);
    EXPECT_FALSE(p->client_rec.connected_[0].second.inbound);
    EXPECT_EQ(p->client_rec.connected_[0].second.address, p->bound);
  }
  EXPECT_TRUE(p->server->Peer(p->server_conn).inbound);
  EXPECT_EQ(p->client->Peer(p->client_conn).address, p->bound);
  EXPECT_THROW(p->client->Peer(987654), InvalidArgument);

  p->client->Send(p->client_conn, Msg(1, "ping"));
  ASSERT_TRUE(p->server_rec.WaitMessages(1));
  p->server->Send(p->server_conn, Msg(2, "pong"));
  ASSERT_TRUE(p->client_rec.WaitMessages(1));
  std::lock_guard lock(p->client_rec.mu_);
  EXPECT_EQ(p->client_rec.messages_[0].msg.meta, "pong");
  EXPECT_EQ(p->client_rec.messages_[0].msg.header.request_id, 2u);
  EXPECT_EQ(p->client_rec.messages_[0].msg.header.type, kTestType);
  // Callbacks never run on the test's thread.
  EXPECT_FALSE(p->client_rec.callback_threads_.contains(std::this_thread::get_id()));
}

TEST_P(TransportTest, KeepsOrderOfTenThousandMessages) {
  std::vector<std::byte> small = Pattern(24, 1);  // outlives the transports
  auto p = Connected();
  constexpr uint64_t kCount = 10000;
  for (uint64_t i = 0; i < kCount; ++i) {
    // Every third message carries a payload, so frames of several shapes mix.
    std::vector<std::span<const std::byte>> payload;
    if (i % 3 == 0) payload.push_back(small);
    p->client->Send(p->client_conn, Msg(i, std::to_string(i), std::move(payload)));
  }
  ASSERT_TRUE(p->server_rec.WaitMessages(kCount));
  std::lock_guard lock(p->server_rec.mu_);
  ASSERT_EQ(p->server_rec.messages_.size(), kCount);
  for (uint64_t i = 0; i < kCount; ++i) {
    const Message& m = p->server_rec.messages_[i].msg;
    ASSERT_EQ(m.header.request_id, i);
    ASSERT_EQ(m.meta, std::to_string(i));
    ASSERT_EQ(m.payload.bytes.size(), i % 3 == 0 ? small.size() : 0u);
  }
}

TEST_P(TransportTest, MultiSpanPayloadArrivesConcatenated) {
  auto a = Pattern(1000, 1);
  auto b = Pattern(70000, 2);
  auto c = Pattern(3, 3);
  std::vector<std::byte> empty;
  auto p = Connected();
  p->client->Send(p->client_conn, Msg(5, "spans", {a, std::span<const std::byte>(empty), b, c}));
  ASSERT_TRUE(p->server_rec.WaitMessages(1));
  std::vector<std::byte> expected = a;
  expected.insert(expected.end(), b.begin(), b.end());
  expected.insert(expected.end(), c.begin(), c.end());
  std::lock_guard lock(p->server_rec.mu_);
  const Message& m = p->server_rec.messages_[0].msg;
  EXPECT_EQ(m.header.payload_length, expected.size());
  ASSERT_EQ(m.payload.bytes.size(), expected.size());
  EXPECT_EQ(std::memcmp(m.payload.bytes.data(), expected.data(), expected.size()), 0);
  EXPECT_EQ(m.meta, "spans");
}

TEST_P(TransportTest, StreamOfMixedSizesNeverStalls) {
  // Large payloads (read in place, with a raised receive low-water mark on
  // TCP) alternate with tiny frames; the last frame must still arrive.
  std::vector<std::byte> posted(3u << 20);
  auto data = Pattern(3u << 20, 12);
  auto p = Connected([&](Pair& pair) {
    pair.server_rec.destination_ = [&](ConnectionId, const Header& h, const std::string& meta) {
      if (meta == "posted") return std::span<std::byte>(posted).first(h.payload_length);
      return std::span<std::byte>();
    };
  });
  const std::vector<size_t> sizes = {700u << 10,    0,    1,        (3u << 20) / 2, 64,
                                     600u << 10,    4096, 3u << 20, 520u << 10,     2,
                                     (1u << 20) + 5};
  constexpr int kCycles = 6;
  uint64_t request = 0;
  for (int c = 0; c < kCycles; ++c) {
    for (size_t size : sizes) {
      std::vector<std::span<const std::byte>> payload;
      if (size > 0) payload.push_back(std::span<const std::byte>(data).first(size));
      const char* where = request % 2 ? "posted" : "owned";
      p->client->Send(p->client_conn, Msg(request++, where, payload));
    }
  }
  p->client->Send(p->client_conn, Msg(request++, "last"));
  ASSERT_TRUE(p->server_rec.WaitMessages(request));
  std::lock_guard lock(p->server_rec.mu_);
  for (uint64_t i = 0; i + 1 < request; ++i) {
    const Message& m = p->server_rec.messages_[i].msg;
    ASSERT_EQ(m.header.request_id, i);
    ASSERT_EQ(m.payload.bytes.size(), sizes[i % sizes.size()]);
    if (!m.payload.in_posted_buffer() && !m.payload.bytes.empty()) {
      ASSERT_EQ(std::memcmp(m.payload.bytes.data(), data.data(), m.payload.bytes.size()), 0);
    }
  }
  EXPECT_EQ(p->server_rec.messages_.back().msg.meta, "last");
}

TEST_P(TransportTest, SmallFramesQueuedBehindALargePayloadAllArrive) {
  // The receiver stalls once so that everything below is queued in the
  // socket when it reads on: a large payload read in place (raising the
  // receive low-water mark on TCP), then enough small frames to fill many
  // reads in a row, then one last tiny frame.
  std::atomic<bool> stalled{false};
  auto big = Pattern(800u << 10, 13);
  auto small = Pattern(4000, 14);
  auto p = Connected([&](Pair& pair) {
    pair.server_rec.on_message_ = [&](ConnectionId, Message&) {
      if (!stalled.exchange(true)) std::this_thread::sleep_for(300ms);
    };
  });
  p->client->Send(p->client_conn, Msg(0, "first"));
  p->client->Send(p->client_conn, Msg(1, "big", {big}));
  constexpr uint64_t kSmall = 560;
  for (uint64_t i = 0; i < kSmall; ++i) p->client->Send(p->client_conn, Msg(2 + i, "", {small}));
  p->client->Send(p->client_conn, Msg(2 + kSmall, "last"));
  ASSERT_TRUE(p->server_rec.WaitMessages(3 + kSmall));
  std::lock_guard lock(p->server_rec.mu_);
  EXPECT_EQ(p->server_rec.messages_[1].msg.payload.bytes.size(), big.size());
  EXPECT_EQ(p->server_rec.messages_.back().msg.meta, "last");
}

TEST_P(TransportTest, OnSentRunsExactlyOncePerMessageOnTheTransportThread) {
  auto payload = Pattern(5000, 4);
  auto p = Connected();
  constexpr int kCount = 500;
  std::vector<std::atomic<int>> calls(kCount);
  std::atomic<int> errors{0};
  std::atomic<int> on_test_thread{0};
  auto test_thread = std::this_thread::get_id();
  for (int i = 0; i < kCount; ++i) {
    p->client->Send(p->client_conn, Msg(i, "", {payload}, [&, i](std::exception_ptr e) {
                      calls[i]++;
                      if (e) errors++;
                      if (std::this_thread::get_id() == test_thread) on_test_thread++;
                    }));
  }
  ASSERT_TRUE(p->server_rec.WaitMessages(kCount));
  // Every on_sent was due by the time the messages arrived; wait for the
  // stragglers, then check none ran twice.
  auto until = std::chrono::steady_clock::now() + kPatience;
  auto all_called = [&] {
    for (auto& c : calls) {
      if (c.load() == 0) return false;
    }
    return true;
  };
  while (!all_called() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(50ms);
  for (int i = 0; i < kCount; ++i) EXPECT_EQ(calls[i].load(), 1) << "message " << i;
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(on_test_thread.load(), 0);
}

TEST_P(TransportTest, ConcurrentSendersKeepPerThreadOrder) {
  auto payload = Pattern(300, 5);
  auto p = Connected();
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 2000;
  std::vector<std::thread> senders;
  for (int t = 0; t < kThreads; ++t) {
    senders.emplace_back([&, t] {
      for (uint64_t i = 0; i < kPerThread; ++i) {
        std::vector<std::span<const std::byte>> spans;
        if (i % 2) spans.push_back(payload);
        p->client->Send(p->client_conn, Msg((uint64_t(t) << 32) | i, "x", std::move(spans)));
      }
    });
  }
  for (auto& s : senders) s.join();
  ASSERT_TRUE(p->server_rec.WaitMessages(kThreads * kPerThread));
  std::lock_guard lock(p->server_rec.mu_);
  std::vector<uint64_t> next(kThreads, 0);
  for (const auto& e : p->server_rec.messages_) {
    uint64_t t = e.msg.header.request_id >> 32;
    uint64_t i = e.msg.header.request_id & 0xffffffffu;
    ASSERT_LT(t, uint64_t{kThreads});
    ASSERT_EQ(i, next[t]) << "thread " << t;
    next[t]++;
    ASSERT_EQ(e.msg.payload.bytes.size(), i % 2 ? payload.size() : 0u);
  }
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(next[t], kPerThread);
}

TEST_P(TransportTest, PostedDestinationReceivesPayloadInPlace) {
  std::vector<std::byte> small_buf(100);
  std::vector<std::byte> big_buf((1 << 20) + 3);
  auto small = Pattern(small_buf.size(), 6);
  auto big = Pattern(big_buf.size(), 7);
  auto other = Pattern(77, 8);
  auto p = Connected([&](Pair& pair) {
    pair.server_rec.destination_ = [&](ConnectionId, const Header& h, const std::string& meta) {
      if (meta == "small") return std::span<std::byte>(small_buf);
      if (meta == "big") return std::span<std::byte>(big_buf);
      (void)h;
      return std::span<std::byte>();
    };
  });
  p->client->Send(p->client_conn, Msg(1, "small", {small}));
  p->client->Send(p->client_conn, Msg(2, "big", {big}));
  p->client->Send(p->client_conn, Msg(3, "other", {other}));
  ASSERT_TRUE(p->server_rec.WaitMessages(3));
  std::lock_guard lock(p->server_rec.mu_);
  const Message& m1 = p->server_rec.messages_[0].msg;
  const Message& m2 = p->server_rec.messages_[1].msg;
  const Message& m3 = p->server_rec.messages_[2].msg;
  EXPECT_TRUE(m1.payload.in_posted_buffer());
  EXPECT_EQ(m1.payload.bytes.data(), small_buf.data());
  EXPECT_EQ(small_buf, small);
  EXPECT_TRUE(m2.payload.in_posted_buffer());
  EXPECT_EQ(m2.payload.bytes.data(), big_buf.data());
  EXPECT_EQ(big_buf, big);
  EXPECT_FALSE(m3.payload.in_posted_buffer());
  ASSERT_EQ(m3.payload.bytes.size(), other.size());
  EXPECT_EQ(std::memcmp(m3.payload.bytes.data(), other.data(), other.size()), 0);
  EXPECT_EQ(p->server_rec.destination_calls_, 3);
}

TEST_P(TransportTest, PeerCloseGivesDisconnectWithReasonOnBothEnds) {
  auto p = Connected();
  Endpoint client_seen_by_server = p->server->Peer(p->server_conn).address;
  p->client->Close(p->client_conn);
  ASSERT_TRUE(p->server_rec.WaitDisconnected(1));
  ASSERT_TRUE(p->client_rec.WaitDisconnected(1));
  {
    std::lock_guard lock(p->server_rec.mu_);
    EXPECT_EQ(p->server_rec.disconnected_[0].first, p->server_conn);
    EXPECT_THAT(p->server_rec.disconnected_[0].second, HasSubstr(client_seen_by_server.ToString()));
    EXPECT_THAT(p->server_rec.disconnected_[0].second, HasSubstr("closed"));
  }
  {
    std::lock_guard lock(p->client_rec.mu_);
    EXPECT_EQ(p->client_rec.disconnected_[0].first, p->client_conn);
    EXPECT_THAT(p->client_rec.disconnected_[0].second, HasSubstr(p->bound.ToString()));
  }
  // Sending on the closed connection reports the error through on_sent.
  std::promise<std::exception_ptr> result;
  p->client->Send(p->client_conn,
                  Msg(9, "late", {}, [&](std::exception_ptr e) { result.set_value(e); }));
  auto f = result.get_future();
  ASSERT_EQ(f.wait_for(kPatience), std::future_status::ready);
  std::exception_ptr e = f.get();
  ASSERT_TRUE(e);
  EXPECT_THROW(std::rethrow_exception(e), PeerLost);
}

TEST_P(TransportTest, ServerShutdownDisconnectsClient) {
  auto p = Connected();
  p->server->Shutdown();
  ASSERT_TRUE(p->client_rec.WaitDisconnected(1));
  {
    std::lock_guard lock(p->server_rec.mu_);
    ASSERT_EQ(p->server_rec.disconnected_.size(), 1u);
    EXPECT_THAT(p->server_rec.disconnected_[0].second, HasSubstr("shut down"));
  }
  std::lock_guard lock(p->client_rec.mu_);
  EXPECT_THAT(p->client_rec.disconnected_[0].second, HasSubstr(p->bound.ToString()));
  p->server->Shutdown();  // idempotent
}

TEST_P(TransportTest, WrongSecretOrJobIdFailsAndServerKeepsServing) {
  Recorder server_rec;
  Recorder bad_rec;
  Recorder good_rec;
  auto server = net_->Make(&server_rec);
  Endpoint bound = server->Listen(net_->Address());
  for (auto [secret, job] : {std::pair{"wrong", "job-a"}, std::pair{"s3cret", "job-b"}}) {
    auto bad = net_->Make(&bad_rec, Options(secret, job));
    EXPECT_THROW(bad->Connect(bound, 10s), AuthFailed) << secret << " " << job;
  }
  EXPECT_TRUE(net_->log().WaitFor("dropped connection from"));
  auto good = net_->Make(&good_rec);
  ConnectionId id = good->Connect(bound, 10s);
  good->Send(id, Msg(42, "after"));
  ASSERT_TRUE(server_rec.WaitMessages(1));
  std::lock_guard lock(server_rec.mu_);
  EXPECT_EQ(server_rec.messages_[0].msg.meta, "after");
  // Only the good client ever reached the handler.
  EXPECT_EQ(server_rec.connected_.size(), 1u);
  EXPECT_EQ(bad_rec.connected_.size(), 0u);
}

TEST_P(TransportTest, AuthFailureMessageNamesTheAddress) {
  Recorder server_rec;
  Recorder bad_rec;
  auto server = net_->Make(&server_rec);
  Endpoint bound = server->Listen(net_->Address());
  auto bad = net_->Make(&bad_rec, Options("s3cret", "another-job"));
  try {
    bad->Connect(bound, 10s);
    FAIL() << "Connect with another job id succeeded";
  } catch (const AuthFailed& e) {
    EXPECT_THAT(e.what(), HasSubstr(bound.ToString()));
    EXPECT_THAT(e.what(), HasSubstr("TANDEM_SECRET"));
  }
}

TEST_P(TransportTest, OversizedMessageDropsOnlyThatConnection) {
  Recorder server_rec;
  Recorder client_rec;
  Recorder other_rec;
  TransportOptions strict = Options();
  strict.limits.max_payload_bytes = 1000;
  auto server = net_->Make(&server_rec, strict);
  auto client = net_->Make(&client_rec);
  auto other = net_->Make(&other_rec);
  Endpoint bound = server->Listen(net_->Address());
  ConnectionId id = client->Connect(bound, 10s);
  ConnectionId other_id = other->Connect(bound, 10s);
  auto big = Pattern(1001, 9);
  client->Send(id, Msg(1, "too big", {big}));
  ASSERT_TRUE(client_rec.WaitDisconnected(1));
  ASSERT_TRUE(server_rec.WaitDisconnected(1));
  {
    std::lock_guard lock(server_rec.mu_);
    EXPECT_THAT(server_rec.disconnected_[0].second, HasSubstr("exceeds"));
    EXPECT_TRUE(server_rec.messages_.empty());
  }
  EXPECT_TRUE(net_->log().WaitFor("exceeds limit 1000"));
  auto fits = Pattern(1000, 10);
  other->Send(other_id, Msg(2, "fits", {fits}));
  ASSERT_TRUE(server_rec.WaitMessages(1));
  std::lock_guard lock(server_rec.mu_);
  EXPECT_EQ(server_rec.messages_[0].msg.meta, "fits");
}

TEST_P(TransportTest, ConnectRetriesUntilTheListenerAppears) {
  Recorder server_rec;
  Recorder client_rec;
  auto server = net_->Make(&server_rec);
  auto client = net_->Make(&client_rec);
  Endpoint target = net_->Address(net_->FreePort());
  std::promise<ConnectionId> connected;
  std::thread connector([&] {
    try {
      connected.set_value(client->Connect(target, 20s));
    } catch (...) {
      connected.set_exception(std::current_exception());
    }
  });
  // Give the connector time for a few refused attempts first.
  std::this_thread::sleep_for(300ms);
  Endpoint bound = server->Listen(target);
  EXPECT_EQ(bound.port, target.port);
  auto f = connected.get_future();
  ConnectionId id = 0;
  EXPECT_NO_THROW(id = f.get());
  connector.join();
  client->Send(id, Msg(3, "late listener"));
  ASSERT_TRUE(server_rec.WaitMessages(1));
}

TEST_P(TransportTest, ConnectToADeadPortTimesOutNamingTheAddress) {
  Recorder rec;
  auto client = net_->Make(&rec);
  Endpoint target = net_->Address(net_->FreePort());
  try {
    client->Connect(target, 300ms);
    FAIL() << "Connect to a dead port succeeded";
  } catch (const Timeout& e) {
    EXPECT_THAT(e.what(), HasSubstr(target.ToString()));
    EXPECT_THAT(e.what(), HasSubstr("last error"));
  }
}

TEST_P(TransportTest, SendOnUnknownConnectionReportsPeerLost) {
  Recorder rec;
  auto t = net_->Make(&rec);
  std::promise<std::exception_ptr> result;
  t->Send(12345, Msg(1, "nobody", {}, [&](std::exception_ptr e) { result.set_value(e); }));
  auto f = result.get_future();
  ASSERT_EQ(f.wait_for(kPatience), std::future_status::ready);
  EXPECT_THROW(std::rethrow_exception(f.get()), PeerLost);
}

TEST_P(TransportTest, HandlerMayReplyFromInsideOnMessage) {
  // The ping-pong a server runs: every reply is sent from the callback.
  Transport* server_ptr = nullptr;
  auto p = Connected([&](Pair& pair) {
    pair.server_rec.on_message_ = [&](ConnectionId id, Message& m) {
      OutgoingMessage reply = Msg(m.header.request_id, "re:" + m.meta);
      reply.owned_storage.assign(m.payload.bytes.begin(), m.payload.bytes.end());
      reply.payload.push_back(reply.owned_storage);
      server_ptr->Send(id, std::move(reply));
    };
  });
  server_ptr = p->server.get();
  constexpr int kRounds = 200;
  for (int i = 0; i < kRounds; ++i) {
    auto data = Pattern(static_cast<size_t>(i * 37), i);
    OutgoingMessage ping = Msg(i, std::to_string(i));
    ping.owned_storage = data;  // the message owns its payload
    ping.payload.push_back(ping.owned_storage);
    p->client->Send(p->client_conn, std::move(ping));
    ASSERT_TRUE(p->client_rec.WaitMessages(i + 1));
    std::lock_guard lock(p->client_rec.mu_);
    const Message& r = p->client_rec.messages_[i].msg;
    ASSERT_EQ(r.meta, "re:" + std::to_string(i));
    ASSERT_EQ(r.payload.bytes.size(), data.size());
    ASSERT_TRUE(std::equal(data.begin(), data.end(), r.payload.bytes.begin()));
  }
}

TEST_P(TransportTest, ReadWhileWaitingDeliversOnTheWaitingThread) {
  // A thread that waits for messages reads them itself on TCP (every
  // callback of the transport then runs there, one at a time); the
  // in-process transport declines and the caller waits its own way.
  auto p = Connected();
  std::promise<void> waiting;  // the first look at `arrived`: the wait began
  std::atomic<bool> looked{false};
  std::thread sender([&] {
    waiting.get_future().wait();
    for (int i = 0; i < 50; ++i) {
      auto data = Pattern(static_cast<size_t>(100 + i * 4001), i);
      OutgoingMessage m = Msg(i, std::to_string(i));
      m.owned_storage = data;
      m.payload.push_back(m.owned_storage);
      p->client->Send(p->client_conn, std::move(m));
    }
  });
  auto arrived = [&] {
    if (!looked.exchange(true)) waiting.set_value();
    std::lock_guard lock(p->server_rec.mu_);
    return p->server_rec.messages_.size() >= 50;
  };
  const bool read_here =
      p->server->ReadWhileWaiting(std::chrono::steady_clock::now() + kPatience, arrived, 5ms);
  if (!looked.exchange(true)) waiting.set_value();  // the in-process transport declined
  sender.join();
  EXPECT_EQ(read_here, net_->is_tcp());
  ASSERT_TRUE(p->server_rec.WaitMessages(50));
  std::lock_guard lock(p->server_rec.mu_);
  for (int i = 0; i < 50; ++i) {
    const Message& m = p->server_rec.messages_[static_cast<size_t>(i)].msg;
    ASSERT_EQ(m.meta, std::to_string(i));
    auto data = Pattern(static_cast<size_t>(100 + i * 4001), i);
    ASSERT_TRUE(std::equal(data.begin(), data.end(), m.payload.bytes.begin()));
  }
  if (read_here) {
    // OnConnected ran on the transport's thread, every message here.
    EXPECT_EQ(p->server_rec.callback_threads_.count(std::this_thread::get_id()), 1u);
    EXPECT_EQ(p->server_rec.callback_threads_.size(), 2u);
  }
}

TEST_P(TransportTest, ReadWhileWaitingEndsAtItsDeadlineAndFromACallbackDeclines) {
  std::atomic<int> from_callback{-1};
  Transport* server_ptr = nullptr;
  auto p = Connected([&](Pair& pair) {
    pair.server_rec.on_message_ = [&](ConnectionId, Message&) {
      from_callback = server_ptr->ReadWhileWaiting(
          std::chrono::steady_clock::now() + 1s, [] { return false; }, 5ms);
    };
  });
  server_ptr = p->server.get();
  const auto start = std::chrono::steady_clock::now();
  const bool read_here = p->server->ReadWhileWaiting(
      start + 100ms, [] { return false; }, 5ms);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(read_here, net_->is_tcp());
  if (read_here) {
    EXPECT_GE(took, 100ms);
    EXPECT_LT(took, 5s);
  }
  p->client->Send(p->client_conn, Msg(1));
  ASSERT_TRUE(p->server_rec.WaitMessages(1));
  EXPECT_EQ(from_callback.load(), 0);  // a callback never drives the loop it runs in
}

INSTANTIATE_TEST_SUITE_P(AllTransports, TransportTest,
                         ::testing::Values(Kind::kTcpV4, Kind::kTcpV6, Kind::kTcpTls,
                                           Kind::kInProc),
                         [](const auto& param_info) { return KindName(param_info.param); });

// Payload sizes around the reader's thresholds, on every transport.
class TransportPayloadTest : public ::testing::TestWithParam<std::tuple<Kind, size_t>> {};

TEST_P(TransportPayloadTest, PayloadArrivesIntact) {
  auto [kind, size] = GetParam();
  if (kind == Kind::kTcpV6 && !Ipv6LoopbackAvailable()) GTEST_SKIP() << "no ::1";
  Net net(kind);
  Recorder server_rec;
  Recorder client_rec;
  auto server = net.Make(&server_rec);
  auto client = net.Make(&client_rec);
  Endpoint bound = server->Listen(net.Address());
  ConnectionId id = client->Connect(bound, 10s);
  auto data = Pattern(size, static_cast<unsigned>(size));
  std::promise<std::exception_ptr> sent;
  client->Send(id, Msg(7, "size", {data}, [&](std::exception_ptr e) { sent.set_value(e); }));
  // A second message right behind it must not be mixed into the first.
  client->Send(id, Msg(8, "after"));
  ASSERT_TRUE(server_rec.WaitMessages(2));
  auto f = sent.get_future();
  ASSERT_EQ(f.wait_for(kPatience), std::future_status::ready);
  EXPECT_FALSE(f.get());
  std::lock_guard lock(server_rec.mu_);
  const Message& m = server_rec.messages_[0].msg;
  EXPECT_EQ(m.header.payload_length, size);
  ASSERT_EQ(m.payload.bytes.size(), size);
  EXPECT_TRUE(size == 0 || std::memcmp(m.payload.bytes.data(), data.data(), size) == 0);
  EXPECT_EQ(server_rec.messages_[1].msg.meta, "after");
  EXPECT_EQ(server_rec.messages_[1].msg.payload.bytes.size(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Sizes, TransportPayloadTest,
                         ::testing::Combine(::testing::Values(Kind::kTcpV4, Kind::kTcpV6,
                                                              Kind::kTcpTls, Kind::kInProc),
                                            ::testing::Values(size_t{0}, size_t{1}, size_t{4095},
                                                              size_t{65537}, size_t{16} << 20)),
                         [](const auto& param_info) {
                           return KindName(std::get<0>(param_info.param)) + "_" +
                                  std::to_string(std::get<1>(param_info.param));
                         });

// Misbehaving raw TCP clients: only a real socket can send these.
class TcpMisbehaviourTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Kind::kTcpV6 && !Ipv6LoopbackAvailable()) GTEST_SKIP() << "no ::1";
    net_ = std::make_unique<Net>(GetParam());
    TransportOptions o = Options();
    o.handshake_timeout = 200ms;
    server_ = net_->Make(&server_rec_, o);
    bound_ = server_->Listen(net_->Address());
  }

  base::UniqueFd RawConnect() {
    Resolution r = Resolve(bound_, false);
    EXPECT_FALSE(r.addresses.empty());
    base::UniqueFd fd;
    EXPECT_EQ(ConnectBefore(r.addresses.at(0), std::chrono::steady_clock::now() + 10s, &fd), 0);
    return fd;
  }

  // True when the server closed `fd` (EOF or reset) before kPatience.
  static bool ServerHangsUp(int fd) {
    auto until = std::chrono::steady_clock::now() + kPatience;
    char buf[4096];
    while (std::chrono::steady_clock::now() < until) {
      ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n == 0) return true;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }

  void ExpectGoodClientStillServed() {
    Recorder good_rec;
    auto good = net_->Make(&good_rec);
    ConnectionId id = good->Connect(bound_, 10s);
    good->Send(id, Msg(1, "still here"));
    ASSERT_TRUE(server_rec_.WaitMessages(1));
    std::lock_guard lock(server_rec_.mu_);
    EXPECT_EQ(server_rec_.messages_[0].msg.meta, "still here");
    EXPECT_EQ(server_rec_.connected_.size(), 1u);
  }

  std::unique_ptr<Net> net_;
  Recorder server_rec_;
  std::unique_ptr<Transport> server_;
  Endpoint bound_;
};

// Past TransportOptions::max_unauthenticated, the oldest connection that has
// not authenticated is dropped (and counted); the newer ones and a real
// client are served.
TEST_P(TcpMisbehaviourTest, TheOldestUnauthenticatedConnectionsGoPastTheBound) {
  TransportOptions o = Options();
  o.handshake_timeout = 30s;
  o.max_unauthenticated = 3;
  server_ = net_->Make(&server_rec_, o);
  bound_ = server_->Listen(net_->Address());
  auto* tcp = dynamic_cast<TcpTransport*>(server_.get());
  ASSERT_NE(tcp, nullptr);
  std::vector<base::UniqueFd> idle;
  for (int i = 0; i < 6; ++i) {
    idle.push_back(RawConnect());
    std::this_thread::sleep_for(20ms);  // accepted in this order
  }
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(ServerHangsUp(idle[i].get())) << "connection " << i;
  for (int i = 3; i < 6; ++i) {
    char byte;
    EXPECT_EQ(::recv(idle[i].get(), &byte, 1, MSG_DONTWAIT), -1) << "connection " << i;
    EXPECT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK) << "connection " << i;
  }
  UnauthenticatedStats st = tcp->Unauthenticated();
  EXPECT_EQ(st.now, 3u);
  EXPECT_EQ(st.dropped, 3u);
  // A real client's connection pushes out one more idle one, and is served.
  ExpectGoodClientStillServed();
  EXPECT_EQ(tcp->Unauthenticated().dropped, 4u);
}

TEST_P(TcpMisbehaviourTest, GarbageBytesAreDroppedWithAWarning) {
  base::UniqueFd fd = RawConnect();
  std::string garbage = "GET / HTTP/1.1\r\nHost: tandem\r\n\r\n" + std::string(100, '\x7f');
  ASSERT_EQ(::send(fd.get(), garbage.data(), garbage.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(garbage.size()));
  EXPECT_TRUE(ServerHangsUp(fd.get()));
  Endpoint me = SocketAddress::LocalOf(fd.get()).ToEndpoint();
  EXPECT_TRUE(net_->log().WaitFor("protocol violation by " + me.ToString()));
  ExpectGoodClientStillServed();
}

TEST_P(TcpMisbehaviourTest, SilentClientIsDroppedAfterTheHandshakeTimeout) {
  base::UniqueFd fd = RawConnect();
  EXPECT_TRUE(ServerHangsUp(fd.get()));
  Endpoint me = SocketAddress::LocalOf(fd.get()).ToEndpoint();
  EXPECT_TRUE(
      net_->log().WaitFor(me.ToString() + " did not complete authentication within 200 ms"));
  ExpectGoodClientStillServed();
}

TEST_P(TcpMisbehaviourTest, ClientThatHangsUpMidFrameIsDropped) {
  base::UniqueFd fd = RawConnect();
  std::string half_header(30, '\0');
  std::memcpy(half_header.data(), "TNDM", 4);
  ASSERT_GT(::send(fd.get(), half_header.data(), half_header.size(), MSG_NOSIGNAL), 0);
  fd.Reset();
  ExpectGoodClientStillServed();
}

// Writes one frame to a blocking socket.
void WriteFrame(int fd, OutgoingMessage m) {
  m.header.meta_length = static_cast<uint32_t>(m.meta.size());
  m.header.payload_length = 0;
  for (auto s : m.payload) m.header.payload_length += s.size();
  std::array<std::byte, kHeaderSize> header;
  EncodeHeader(m.header, header);
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size());
  bytes += m.meta;
  for (auto s : m.payload) bytes.append(reinterpret_cast<const char*>(s.data()), s.size());
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

// Reads one handshake frame (no payload) from a blocking socket.
Message ReadHandshakeFrame(int fd) {
  std::array<std::byte, kHeaderSize> header;
  EXPECT_EQ(::recv(fd, header.data(), header.size(), MSG_WAITALL),
            static_cast<ssize_t>(header.size()));
  Message m;
  m.header = DecodeHeader(header, HandshakeLimits());
  m.meta.resize(m.header.meta_length);
  if (!m.meta.empty()) {
    EXPECT_EQ(::recv(fd, m.meta.data(), m.meta.size(), MSG_WAITALL),
              static_cast<ssize_t>(m.meta.size()));
  }
  return m;
}

TEST_P(TcpMisbehaviourTest, PeerVanishingInTheMiddleOfALargePayloadIsReported) {
  // The client authenticates by hand, announces 8 MiB and sends 3 MiB: the
  // server is then waiting for a large rest (with a raised SO_RCVLOWAT) and
  // must still notice the hang-up.
  base::UniqueFd fd = RawConnect();
  int flags = ::fcntl(fd.get(), F_GETFL);
  ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  ClientHandshake hs(HandshakeCredentials{"job-a", "s3cret"});
  WriteFrame(fd.get(), hs.Hello());
  WriteFrame(fd.get(), hs.OnChallenge(ReadHandshakeFrame(fd.get())));
  hs.OnWelcome(ReadHandshakeFrame(fd.get()));
  ASSERT_TRUE(server_rec_.WaitConnected(1));

  Header h;
  h.type = kTestType;
  h.payload_length = 8u << 20;
  std::array<std::byte, kHeaderSize> header;
  EncodeHeader(h, header);
  auto part = Pattern(3u << 20, 11);
  ASSERT_EQ(::send(fd.get(), header.data(), header.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(header.size()));
  ASSERT_EQ(::send(fd.get(), part.data(), part.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(part.size()));
  Endpoint me = SocketAddress::LocalOf(fd.get()).ToEndpoint();
  // Let the server read what it got before the hang-up.
  std::this_thread::sleep_for(100ms);
  fd.Reset();
  ASSERT_TRUE(server_rec_.WaitDisconnected(1));
  std::lock_guard lock(server_rec_.mu_);
  EXPECT_THAT(server_rec_.disconnected_[0].second, HasSubstr(me.ToString()));
  EXPECT_THAT(server_rec_.disconnected_[0].second, HasSubstr("in the middle of a message"));
  EXPECT_TRUE(server_rec_.messages_.empty());
}

INSTANTIATE_TEST_SUITE_P(Tcp, TcpMisbehaviourTest, ::testing::Values(Kind::kTcpV4, Kind::kTcpV6),
                         [](const auto& param_info) { return KindName(param_info.param); });

TEST(TcpTransportTest, ListensOnTheWildcardForBothFamilies) {
  if (!Ipv6LoopbackAvailable()) GTEST_SKIP() << "no ::1";
  Net net(Kind::kTcpV6);
  Recorder server_rec;
  Recorder v4_rec;
  Recorder v6_rec;
  auto server = net.Make(&server_rec);
  Endpoint bound = server->Listen({"::", 0});
  auto v4 = net.Make(&v4_rec);
  auto v6 = net.Make(&v6_rec);
  v4->Connect({"127.0.0.1", bound.port}, 10s);
  v6->Connect({"::1", bound.port}, 10s);
  ASSERT_TRUE(server_rec.WaitConnected(2));
  std::lock_guard lock(server_rec.mu_);
  std::set<std::string> hosts;
  for (auto& [id, peer] : server_rec.connected_) hosts.insert(peer.address.host);
  EXPECT_TRUE(hosts.contains("127.0.0.1"));
  EXPECT_TRUE(hosts.contains("::1"));
}

TEST(TcpTransportTest, ConnectsByName) {
  Net net(Kind::kTcpV4);
  Recorder server_rec;
  Recorder client_rec;
  auto server = net.Make(&server_rec);
  Endpoint bound = server->Listen({"127.0.0.1", 0});
  auto client = net.Make(&client_rec);
  ConnectionId id = client->Connect({"localhost", bound.port}, 10s);
  EXPECT_EQ(client->Peer(id).address.port, bound.port);
}

TEST(TcpTransportTest, UnresolvableNameTimesOutNamingIt) {
  Net net(Kind::kTcpV4);
  Recorder rec;
  auto client = net.Make(&rec);
  // .invalid never resolves (RFC 6761); the resolver answers without the
  // network, and the failure is retried like a Kubernetes name not yet
  // published.
  try {
    client->Connect({"peer-7.tandem.invalid", 9000}, 300ms);
    FAIL() << "Connect to an unresolvable name succeeded";
  } catch (const Timeout& e) {
    EXPECT_THAT(e.what(), HasSubstr("peer-7.tandem.invalid:9000"));
  } catch (const IoError& e) {
    // A resolver that reports a permanent failure is not retried.
    EXPECT_THAT(e.what(), HasSubstr("peer-7.tandem.invalid"));
  }
}

TEST(TcpTransportTest, ListenOnAnAddressInUseFailsNamingIt) {
  Net net(Kind::kTcpV4);
  Recorder a_rec;
  Recorder b_rec;
  auto a = net.Make(&a_rec);
  auto b = net.Make(&b_rec);
  Endpoint bound = a->Listen({"127.0.0.1", 0});
  try {
    b->Listen(bound);
    FAIL() << "second Listen on " << bound.ToString() << " succeeded";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr(bound.ToString()));
  }
}

TEST(InProcTransportTest, ListenOnATakenAddressFails) {
  InProcNetwork network;
  base::Logger log("test", 0, -1);
  Recorder a_rec;
  Recorder b_rec;
  InProcTransport a(network, Options(), &a_rec, log);
  InProcTransport b(network, Options(), &b_rec, log);
  Endpoint bound = a.Listen({"scheduler", 9000});
  EXPECT_EQ(bound, (Endpoint{"scheduler", 9000}));
  EXPECT_THROW(b.Listen({"scheduler", 9000}), IoError);
  Endpoint auto_port = b.Listen({"scheduler", 0});
  EXPECT_NE(auto_port.port, 0);
  EXPECT_NE(auto_port.port, 9000);
}

TEST(InProcTransportTest, ManyNodesInOneProcess) {
  InProcNetwork network;
  base::Logger log("test", 0, -1);
  constexpr int kNodes = 8;
  Recorder hub_rec;
  InProcTransport hub(network, Options(), &hub_rec, log);
  Endpoint bound = hub.Listen({"hub", 0});
  std::vector<std::unique_ptr<Recorder>> recs;
  std::vector<std::unique_ptr<InProcTransport>> nodes;
  for (int i = 0; i < kNodes; ++i) recs.push_back(std::make_unique<Recorder>());
  for (int i = 0; i < kNodes; ++i) {
    nodes.push_back(std::make_unique<InProcTransport>(network, Options(), recs[i].get(), log));
    ConnectionId id = nodes[i]->Connect(bound, 10s);
    nodes[i]->Send(id, Msg(i, "hello"));
  }
  ASSERT_TRUE(hub_rec.WaitMessages(kNodes));
  std::lock_guard lock(hub_rec.mu_);
  std::set<uint64_t> seen;
  for (auto& e : hub_rec.messages_) seen.insert(e.msg.header.request_id);
  EXPECT_EQ(seen.size(), size_t{kNodes});
  nodes.clear();
}

// A sender that shuts down while its peer still holds its messages (queued
// on the peer's thread, not yet delivered) gets every on_sent, exactly
// once, before Shutdown returns: before the fix the peer's hand-back found
// the sender gone from the network and the callback was dropped, which left
// a reliable transport above waiting for a message it never failed.
class InProcShutdownOwed : public ::testing::TestWithParam<int> {};

TEST_P(InProcShutdownOwed, EveryOnSentRunsOnceBeforeShutdownReturns) {
  const int n = GetParam();
  InProcNetwork network;
  base::Logger log("test", 0, -1);
  Recorder a_rec;
  Recorder b_rec;
  // A slow receiver: the sender's messages wait on its thread.
  b_rec.on_message_ = [](ConnectionId, const Message&) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  };
  auto b = std::make_unique<InProcTransport>(network, Options(), &b_rec, log);
  auto a = std::make_unique<InProcTransport>(network, Options(), &a_rec, log);
  Endpoint at = b->Listen({"b", 0});
  ConnectionId id = a->Connect(at, 10s);
  std::vector<std::atomic<int>> calls(static_cast<size_t>(n));
  std::vector<std::byte> payload(64, std::byte{1});
  for (int i = 0; i < n; ++i) {
    a->Send(id, Msg(static_cast<uint64_t>(i), "m", {std::span<const std::byte>(payload)},
                    [&calls, i](std::exception_ptr) { calls[static_cast<size_t>(i)]++; }));
  }
  a->Shutdown();
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(calls[static_cast<size_t>(i)].load(), 1) << "message " << i << " of " << n;
  }
  b->Shutdown();
}

INSTANTIATE_TEST_SUITE_P(Counts, InProcShutdownOwed, ::testing::Values(1, 50, 500));

}  // namespace
}  // namespace tandem::net
