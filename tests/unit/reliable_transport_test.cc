// ReliableTransport (docs/protocol-resend.md) over the in-process transport,
// with the PS_DROP_MSG hook losing data messages and acks on purpose. The
// tests of the retry budget and of giving up run on a manual clock the test
// advances (support/manual_time.h); delivery under drops runs in real time.
#include "net/reliable_transport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "base/logger.h"
#include "net/inproc_transport.h"
#include "support/manual_time.h"
#include "support/sanitizer.h"
#include "tandem/error.h"

namespace tandem::net {
namespace {

using tandem::testing::AdvanceUntil;
using tandem::testing::WaitFor;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr auto kPatience = 60s;  // only a hang reaches it
constexpr uint16_t kDataType = msgtype::kKvFirst + 2;

std::byte Pattern(uint64_t seq, size_t i) { return static_cast<std::byte>((seq * 131 + i) & 0xff); }

// The upper handler of the receiving side: checks order and content of every
// message, and that PayloadDestination is asked once per message (never for
// a dropped copy or a duplicate). Posts a buffer for even sequence numbers.
class Receiver final : public TransportHandler {
 public:
  explicit Receiver(size_t payload_size) : payload_size_(payload_size) {}

  std::span<std::byte> PayloadDestination(ConnectionId, const Header& h,
                                          const std::string&) override {
    std::lock_guard lock(mu_);
    if (++destination_calls_[h.request_id] != 1) {
      Fail("PayloadDestination asked twice for message " + std::to_string(h.request_id));
    }
    if (h.request_id % 2 != 0) return {};
    auto& buf = posted_[h.request_id];
    buf.resize(h.payload_length);
    return buf;
  }

  void OnMessage(ConnectionId, Message&& m) override {
    std::lock_guard lock(mu_);
    const uint64_t seq = m.header.request_id;
    if (seq != next_)
      Fail("got message " + std::to_string(seq) + ", expected " + std::to_string(next_));
    next_ = seq + 1;
    if (m.payload.bytes.size() != payload_size_)
      Fail("wrong payload size for " + std::to_string(seq));
    bool posted = seq % 2 == 0 && payload_size_ > 0;
    if (posted != m.payload.in_posted_buffer()) {
      Fail("message " + std::to_string(seq) + (posted ? " not" : "") + " in the posted buffer");
    }
    if (posted && m.payload.bytes.data() != posted_[seq].data()) Fail("posted buffer not used");
    for (size_t i = 0; i < m.payload.bytes.size(); ++i) {
      if (m.payload.bytes[i] != Pattern(seq, i)) {
        Fail("payload of message " + std::to_string(seq) + " differs at byte " + std::to_string(i) +
             " (read after on_sent?)");
        break;
      }
    }
    posted_.erase(seq);
    ++received_;
    cv_.notify_all();
  }

  void OnDisconnected(ConnectionId, const std::string& reason) override {
    std::lock_guard lock(mu_);
    disconnect_reason_ = reason;
    disconnected_ = true;
    cv_.notify_all();
  }

  bool WaitReceived(uint64_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kPatience, [&] { return received_ >= n; });
  }
  bool WaitDisconnected() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kPatience, [&] { return disconnected_; });
  }
  std::vector<std::string> errors() {
    std::lock_guard lock(mu_);
    return errors_;
  }
  uint64_t received() {
    std::lock_guard lock(mu_);
    return received_;
  }
  size_t destination_calls() {
    std::lock_guard lock(mu_);
    return destination_calls_.size();
  }
  std::string disconnect_reason() {
    std::lock_guard lock(mu_);
    return disconnect_reason_;
  }

 private:
  void Fail(std::string e) {
    if (errors_.size() < 10) errors_.push_back(std::move(e));
  }

  const size_t payload_size_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_ = 0;
  uint64_t received_ = 0;
  std::unordered_map<uint64_t, int> destination_calls_;
  std::unordered_map<uint64_t, std::vector<std::byte>> posted_;
  std::vector<std::string> errors_;
  bool disconnected_ = false;
  std::string disconnect_reason_;
};

// The sending side's handler: only connection events.
class Sender final : public TransportHandler {
 public:
  void OnMessage(ConnectionId, Message&&) override {}
  void OnDisconnected(ConnectionId, const std::string& reason) override {
    std::lock_guard lock(mu);
    reason_ = reason;
  }
  std::string reason() {
    std::lock_guard lock(mu);
    return reason_;
  }
  std::mutex mu;
  std::string reason_;
};

// A pair of reliable transports, `a` connected to `b`, both losing
// `drop_percent` of what they receive, both on `clock` (null: the real one).
struct Pair {
  Pair(ReliableOptions oa, ReliableOptions ob, size_t payload_size,
       const base::Clock* clock = nullptr)
      : log_a("a", 0, -1), log_b("b", 0, -1), receiver(payload_size) {
    TransportOptions t;
    t.job_id = "reliable-test";
    t.secret = "s";
    b = std::make_unique<ReliableTransport>(
        ob, &receiver, log_b,
        [&](TransportHandler* h) {
          return std::make_unique<InProcTransport>(network, t, h, log_b);
        },
        clock);
    a = std::make_unique<ReliableTransport>(
        oa, &sender, log_a,
        [&](TransportHandler* h) {
          return std::make_unique<InProcTransport>(network, t, h, log_a);
        },
        clock);
    Endpoint at = b->Listen({"b", 0});
    conn = a->Connect(at, 5s);
  }
  ~Pair() {
    a->Shutdown();
    b->Shutdown();
  }
  InProcNetwork network;
  base::Logger log_a, log_b;
  Sender sender;
  Receiver receiver;
  std::unique_ptr<ReliableTransport> b, a;
  ConnectionId conn = 0;
};

ReliableOptions Options(int drop_percent, uint64_t seed, uint32_t window = 1024) {
  ReliableOptions o;
  o.resend_timeout = 10ms;
  o.max_retries = 1000;  // the budget is tested on its own below
  o.window = window;
  o.drop_percent = drop_percent;
  o.drop_seed = seed;
  return o;
}

// Sends `n` messages of `size` bytes from `p.a`; each payload is borrowed
// from its own buffer, which on_sent poisons at once. Returns once every
// on_sent ran; checks each ran exactly once and without error.
void SendAll(Pair& p, uint64_t n, size_t size) {
  std::vector<std::vector<std::byte>> bufs(n);
  std::vector<std::atomic<int>> calls(n);
  std::atomic<uint64_t> done{0};
  std::atomic<int> errors{0};
  std::mutex mu;
  std::condition_variable cv;
  for (uint64_t seq = 0; seq < n; ++seq) {
    bufs[seq].resize(size);
    for (size_t i = 0; i < size; ++i) bufs[seq][i] = Pattern(seq, i);
    OutgoingMessage m;
    m.header.type = kDataType;
    m.header.request_id = seq;
    m.meta = "seq=" + std::to_string(seq);
    if (size > 0) {
      // Two spans, to keep scatter/gather honest.
      std::span<const std::byte> all(bufs[seq]);
      m.payload = {all.first(size / 2), all.subspan(size / 2)};
    }
    m.on_sent = [&, seq](std::exception_ptr e) {
      if (e) ++errors;
      ++calls[seq];
      // The transport promised to be done with the payload: poison it, so a
      // later read would deliver wrong bytes.
      if (!bufs[seq].empty()) std::memset(bufs[seq].data(), 0xEE, bufs[seq].size());
      if (++done == n) {
        std::lock_guard lock(mu);
        cv.notify_all();
      }
    };
    p.a->Send(p.conn, std::move(m));
  }
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, kPatience, [&] { return done.load() == n; }))
      << done.load() << " of " << n << " on_sent ran";
  EXPECT_EQ(errors.load(), 0);
  for (uint64_t seq = 0; seq < n; ++seq) ASSERT_EQ(calls[seq].load(), 1) << "message " << seq;
}

class ReliableDelivery : public ::testing::TestWithParam<std::tuple<int, size_t>> {};

TEST_P(ReliableDelivery, EveryMessageExactlyOnceInOrderDespiteDrops) {
  const auto [drop, size] = GetParam();
  const uint64_t n = size >= 65536 ? 200 : 1500;
  ReliableOptions oa = Options(drop, 11 + drop), ob = Options(drop, 97 + drop);
  if (drop == 0) {
    // Nothing is lost: a timeout no scheduling delay reaches, so that any
    // resend or duplicate is a bug.
    oa.resend_timeout = ob.resend_timeout = 30s;
  }
  Pair p(oa, ob, size);
  SendAll(p, n, size);
  ASSERT_TRUE(p.receiver.WaitReceived(n));
  EXPECT_THAT(p.receiver.errors(), ::testing::IsEmpty());
  EXPECT_EQ(p.receiver.received(), n);
  EXPECT_EQ(p.receiver.destination_calls(), size > 0 ? n : 0u);
  ReliableStats sa = p.a->Stats(), sb = p.b->Stats();
  EXPECT_EQ(sa.data_sent, n);
  EXPECT_EQ(sb.delivered, n);
  EXPECT_EQ(sa.unacked_now, 0u);
  EXPECT_EQ(sb.held_now, 0u);
  if (drop == 0) {
    EXPECT_EQ(sb.dropped, 0u);
    EXPECT_EQ(sa.resent, 0u);
    EXPECT_EQ(sb.duplicates, 0u);
  } else {
    // Something was lost and made good again.
    EXPECT_GT(sb.dropped + sa.dropped, 0u);
    EXPECT_GT(sa.resent, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(DropRatesAndSizes, ReliableDelivery,
                         ::testing::Combine(::testing::Values(0, 2, 5, 30),
                                            ::testing::Values(size_t{0}, size_t{100}, size_t{4096},
                                                              size_t{65536 + 3})),
                         [](const auto& param_info) {
                           return "drop" + std::to_string(std::get<0>(param_info.param)) +
                                  "_bytes" + std::to_string(std::get<1>(param_info.param));
                         });

class ReliableWindow : public ::testing::TestWithParam<uint32_t> {};

// Under ThreadSanitizer every message costs 5-15 times as much, and with a
// window of 16 each loss stalls the sender for a resend time-out: 100k
// messages took most of the 60 s patience there (68% done once, on a
// loaded machine), so that window sends 20k under TSan (still 1250
// windows). The window of 1024 keeps 100k: with 20k its lost acks were
// all covered by later ones before any resend once (no duplicate to see).
using tandem::testing::kUnderTsan;

// 100k messages (20k with a window of 16 under TSan) with 5% of data and
// acks lost: the receiver's dedup state (expected id + held ids) never
// exceeds the window, whatever the count.
TEST_P(ReliableWindow, DedupMemoryStaysBoundedOver100kMessages) {
  const uint32_t window = GetParam();
  const uint64_t n = kUnderTsan && window <= 16 ? 20000 : 100000;
  Pair p(Options(5, 3, window), Options(5, 4, window), 8);
  SendAll(p, n, 8);
  ASSERT_TRUE(p.receiver.WaitReceived(n));
  EXPECT_THAT(p.receiver.errors(), ::testing::IsEmpty());
  ReliableStats sa = p.a->Stats(), sb = p.b->Stats();
  EXPECT_LE(sb.held_max, window - 1);
  EXPECT_GT(sb.held_max, 0u);    // losses did reorder arrivals
  EXPECT_GT(sb.duplicates, 0u);  // lost acks made resends of delivered ids
  EXPECT_EQ(sb.held_now, 0u);
  EXPECT_EQ(sa.unacked_now, 0u);
  EXPECT_EQ(sa.waiting_now, 0u);
  EXPECT_EQ(sb.delivered, n);
}

INSTANTIATE_TEST_SUITE_P(Windows, ReliableWindow, ::testing::Values(16u, 1024u));

TEST(ReliableTransportTest, RetryBudgetExhaustedFailsWithAClearError) {
  base::ManualClock clock;
  ReliableOptions oa = Options(0, 1);
  oa.max_retries = 3;
  std::vector<std::byte> buf(16, std::byte{7});  // outlives the transports
  Pair p(oa, Options(100, 2), 16, &clock);       // b loses everything
  std::promise<std::exception_ptr> result;
  OutgoingMessage m;
  m.header.type = kDataType;
  m.header.recipient = 5;
  m.payload = {std::span<const std::byte>(buf)};
  m.on_sent = [&](std::exception_ptr e) { result.set_value(e); };
  p.a->Send(p.conn, std::move(m));
  auto f = result.get_future();
  // However the steps fall, the message is sent budget + 1 times.
  ASSERT_TRUE(AdvanceUntil(clock, oa.resend_timeout / 2,
                           [&] { return f.wait_for(0s) == std::future_status::ready; }));
  std::exception_ptr e = f.get();
  ASSERT_TRUE(e);
  try {
    std::rethrow_exception(e);
  } catch (const Timeout& t) {
    std::string what = t.what();
    EXPECT_THAT(what, HasSubstr("kv message 130 with message id 1 to b:"));
    EXPECT_THAT(what, HasSubstr("(node 5)"));
    EXPECT_THAT(what, HasSubstr("not acknowledged after 4 copies"));
    EXPECT_THAT(what, HasSubstr("TANDEM_RESEND_RETRIES=3"));
  } catch (const std::exception& other) {
    FAIL() << "expected Timeout, got " << other.what();
  }
  // Every copy was read before on_sent ran: the budget's copies all went out.
  EXPECT_EQ(p.a->Stats().resent, 3u);
  // The connection is given up, and the upper layer is told why.
  ASSERT_TRUE(p.receiver.WaitDisconnected());
  EXPECT_TRUE(WaitFor([&] { return !p.sender.reason().empty(); }));
  EXPECT_THAT(p.sender.reason(), HasSubstr("was not acknowledged after 4 copies"));
  // Later sends fail instead of hanging.
  std::promise<std::exception_ptr> later;
  OutgoingMessage m2;
  m2.header.type = kDataType;
  m2.on_sent = [&](std::exception_ptr e2) { later.set_value(e2); };
  p.a->Send(p.conn, std::move(m2));
  auto f2 = later.get_future();
  ASSERT_EQ(f2.wait_for(kPatience), std::future_status::ready);
  EXPECT_TRUE(f2.get());
}

// The caller's payload stays borrowed until the ack: while the peer loses
// every copy, on_sent does not run.
TEST(ReliableTransportTest, PayloadStaysBorrowedUntilAcknowledged) {
  base::ManualClock clock;
  ReliableOptions oa = Options(0, 1);
  oa.max_retries = 8;
  std::vector<std::byte> buf(16, std::byte{7});  // outlives the transports
  // Shared with on_sent, which runs when the transports shut down at the
  // end of the test (after the locals declared below them are gone).
  auto sent = std::make_shared<std::atomic<bool>>(false);
  Pair p(oa, Options(100, 2), 16, &clock);
  OutgoingMessage m;
  m.header.type = kDataType;
  m.payload = {std::span<const std::byte>(buf)};
  m.on_sent = [sent](std::exception_ptr) { *sent = true; };
  p.a->Send(p.conn, std::move(m));
  // Two copies more were sent and found no ack.
  EXPECT_TRUE(AdvanceUntil(clock, oa.resend_timeout / 2, [&] { return p.a->Stats().resent >= 2; }));
  EXPECT_FALSE(sent->load());
  EXPECT_EQ(p.a->Stats().unacked_now, 1u);
  // No ack is coming: Shutdown need not linger for one.
  p.a->AbandonUnacknowledged();
}

// Shutdown lingers for acknowledgements, unless the job has failed: then
// AbandonUnacknowledged makes it return at once, however long the budget,
// whether called before Shutdown or while Shutdown already waits.
class ReliableShutdown : public ::testing::TestWithParam<bool> {};

TEST_P(ReliableShutdown, AbandonEndsTheLingerAtOnce) {
  const bool abandon_while_waiting = GetParam();
  ReliableOptions oa = Options(0, 1);
  oa.resend_timeout = 1000ms;
  oa.max_retries = 29;  // a 30 s linger: the test fails by its time if it is honoured
  std::vector<std::byte> buf(16, std::byte{7});  // outlives the transports
  auto failed = std::make_shared<std::atomic<bool>>(false);
  Pair p(oa, Options(100, 2), 16);  // b loses everything: no ack ever comes
  OutgoingMessage m;
  m.header.type = kDataType;
  m.payload = {std::span<const std::byte>(buf)};
  m.on_sent = [failed](std::exception_ptr e) { *failed = e != nullptr; };
  p.a->Send(p.conn, std::move(m));
  EXPECT_EQ(p.a->Stats().unacked_now, 1u);
  const auto start = std::chrono::steady_clock::now();
  std::thread abandoner;
  if (abandon_while_waiting) {
    abandoner = std::thread([&] {
      std::this_thread::sleep_for(200ms);
      p.a->AbandonUnacknowledged();
    });
  } else {
    p.a->AbandonUnacknowledged();
  }
  p.a->Shutdown();
  const auto took = std::chrono::steady_clock::now() - start;
  if (abandoner.joinable()) abandoner.join();
  EXPECT_LT(took, 5s) << "Shutdown waited for the retry budget";
  if (abandon_while_waiting) {
    EXPECT_GE(took, 150ms) << "Shutdown did not linger before";
  }
  // The unacknowledged message failed instead of being acknowledged.
  EXPECT_TRUE(failed->load());
}

INSTANTIATE_TEST_SUITE_P(BeforeOrDuringShutdown, ReliableShutdown, ::testing::Bool());

// After AbandonUnacknowledged, a message the peer does not acknowledge within
// one resend timeout fails with PeerLost (its payload released) instead of
// being resent for the whole budget; a peer that acknowledges is unaffected.
class ReliableAbandon : public ::testing::TestWithParam<int> {};

TEST_P(ReliableAbandon, UnansweredMessagesFailAfterOneResendTimeout) {
  const auto timeout = std::chrono::milliseconds(GetParam());
  base::ManualClock clock;
  ReliableOptions oa = Options(0, 1);
  oa.resend_timeout = timeout;
  oa.max_retries = 1000;  // a budget of 1000 timeouts: far beyond the test's patience
  std::vector<std::byte> buf(16, std::byte{7});  // outlives the transports
  {
    // A peer that answers: delivery still works after abandoning.
    Pair ok(oa, Options(0, 3), 16, &clock);
    ok.a->AbandonUnacknowledged();
    SendAll(ok, 50, 16);
  }
  Pair p(oa, Options(100, 2), 16, &clock);  // b loses everything
  p.a->AbandonUnacknowledged();
  std::promise<std::exception_ptr> result;
  OutgoingMessage m;
  m.header.type = kDataType;
  m.payload = {std::span<const std::byte>(buf)};
  m.on_sent = [&](std::exception_ptr e) { result.set_value(e); };
  const auto start = clock.Now();
  p.a->Send(p.conn, std::move(m));
  auto f = result.get_future();
  // A tenth of the timeout at a time: not before one timeout, and not after
  // a resend.
  ASSERT_TRUE(AdvanceUntil(clock, timeout / 10, [&] {
    return f.wait_for(0s) == std::future_status::ready || clock.Now() - start > 20 * timeout;
  }));
  ASSERT_EQ(f.wait_for(0s), std::future_status::ready)
      << "the unanswered message was resent instead of given up";
  EXPECT_GE(clock.Now() - start, timeout);
  std::exception_ptr e = f.get();
  ASSERT_TRUE(e);
  try {
    std::rethrow_exception(e);
  } catch (const PeerLost& lost) {
    EXPECT_THAT(lost.what(), HasSubstr("kv message 130 with message id 1 to b:"));
    EXPECT_THAT(lost.what(), HasSubstr("and the job has failed; giving up the connection"));
  } catch (const std::exception& other) {
    FAIL() << "expected PeerLost, got " << other.what();
  }
  EXPECT_EQ(p.a->Stats().resent, 0u);
}

INSTANTIATE_TEST_SUITE_P(ResendTimeouts, ReliableAbandon, ::testing::Values(50, 300));

// A peer without PS_RESEND sends messages without ids: the reliable side
// drops the connection and says why.
TEST(ReliableTransportTest, PeerWithoutResendIsRefused) {
  InProcNetwork network;
  base::Logger log("t", 0, -1);
  TransportOptions t;
  Receiver receiver(0);
  Sender plain_handler;
  ReliableTransport reliable(Options(0, 1), &receiver, log, [&](TransportHandler* h) {
    return std::make_unique<InProcTransport>(network, t, h, log);
  });
  InProcTransport plain(network, t, &plain_handler, log);
  Endpoint at = reliable.Listen({"r", 0});
  ConnectionId c = plain.Connect(at, 5s);
  OutgoingMessage m;
  m.header.type = kDataType;
  plain.Send(c, std::move(m));
  ASSERT_TRUE(receiver.WaitDisconnected());
  EXPECT_THAT(receiver.disconnect_reason(), HasSubstr("without a message id"));
  EXPECT_EQ(receiver.received(), 0u);
  plain.Shutdown();
  reliable.Shutdown();
}

TEST(ReliableTransportTest, RejectsUnusableOptions) {
  InProcNetwork network;
  base::Logger log("t", 0, -1);
  Sender h;
  auto make = [&](ReliableOptions o) {
    return ReliableTransport(o, &h, log, [&](TransportHandler* inner) {
      return std::make_unique<InProcTransport>(network, TransportOptions{}, inner, log);
    });
  };
  ReliableOptions bad_drop;
  bad_drop.drop_percent = 101;
  EXPECT_THROW(make(bad_drop), InvalidArgument);
  ReliableOptions bad_window;
  bad_window.window = 0;
  EXPECT_THROW(make(bad_window), InvalidArgument);
  ReliableOptions bad_timeout;
  bad_timeout.resend_timeout = 0ms;
  EXPECT_THROW(make(bad_timeout), InvalidArgument);
}

}  // namespace
}  // namespace tandem::net
