// Back-pressure on the TCP transport's send queues (docs/transport.md,
// "Back-pressure"): a sender that outruns a receiver which does not read
// waits instead of queueing without bound, gives up with a Timeout that says
// what it waited for, and a correct stream still arrives whole and in order.
//
// A receiver "does not drain" here because its handler blocks the receiving
// transport's only thread until the test releases it; with small socket
// buffers the kernel then holds little, and the sender's queue fills.
#include "net/send_queue_bound.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

#include "base/logger.h"
#include "base/stats.h"
#include "cluster/traffic_labels.h"
#include "net/tcp_transport.h"
#include "support/peak_sampler.h"
#include "tandem/error.h"

namespace tandem::net {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr auto kPatience = 60s;  // only a hang reaches it
constexpr uint16_t kTestType = msgtype::kClusterFirst + 7;
constexpr int kReceiverNode = 1;

// Receives messages; while `stalled`, its callback holds the transport's
// thread (so nothing more is read from any socket).
class StallingReceiver : public TransportHandler {
 public:
  void OnMessage(ConnectionId, Message&& msg) override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !stalled_; });
    sequence_.push_back(std::stoull(msg.meta));
    sizes_.push_back(msg.payload.bytes.size());
    first_bytes_.push_back(msg.payload.bytes.empty() ? std::byte{0} : msg.payload.bytes[0]);
    cv_.notify_all();
  }
  void Stall() {
    std::lock_guard lock(mu_);
    stalled_ = true;
  }
  void Release() {
    std::lock_guard lock(mu_);
    stalled_ = false;
    cv_.notify_all();
  }
  bool WaitMessages(size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kPatience, [&] { return sequence_.size() >= n; });
  }
  std::vector<uint64_t> sequence() {
    std::lock_guard lock(mu_);
    return sequence_;
  }
  std::vector<size_t> sizes() {
    std::lock_guard lock(mu_);
    return sizes_;
  }
  std::vector<std::byte> first_bytes() {
    std::lock_guard lock(mu_);
    return first_bytes_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stalled_ = false;
  std::vector<uint64_t> sequence_;
  std::vector<size_t> sizes_;
  std::vector<std::byte> first_bytes_;
};

class Quiet : public TransportHandler {
 public:
  void OnMessage(ConnectionId, Message&&) override {}
};

// The value of one series of `stats` (0 when absent).
double SeriesValue(const base::StatsRegistry& stats, const std::string& name) {
  for (const auto& f : stats.Families()) {
    if (f.name != name) continue;
    for (const auto& s : f.series) {
      if (s.labels.at("peer_role") != "server") continue;
      if (s.gauge) return s.gauge->value();
      if (s.counter) return static_cast<double>(s.counter->value());
    }
  }
  return 0;
}

// A sender transport and a receiver transport over loopback with small
// socket buffers, the sender's queues bounded by `max_queued` bytes.
class BoundedPair {
 public:
  BoundedPair(uint64_t max_queued, std::chrono::milliseconds wait_timeout)
      : meter_(stats_, cluster::NodeTrafficLabels([](int) { return "server"; })) {
    TransportOptions opts;
    opts.job_id = "send-queue-test";
    opts.secret = "s";
    TcpTuning tuning;
    tuning.socket_buffer_bytes = 64 << 10;
    tuning.send_queue.max_queued_bytes = max_queued;
    tuning.send_queue.wait_timeout = wait_timeout;
    tuning.send_queue.meter = &meter_;
    receiver_transport_ = std::make_unique<TcpTransport>(opts, &receiver_, log_, tuning);
    sender_transport_ = std::make_unique<TcpTransport>(opts, &quiet_, log_, tuning);
    Endpoint at = receiver_transport_->Listen({"127.0.0.1", 0});
    connection_ = sender_transport_->Connect(at, 10s);
  }
  ~BoundedPair() {
    receiver_.Release();
    sender_transport_->Shutdown();
    receiver_transport_->Shutdown();
  }

  // Sends message `seq` with `payload` (borrowed: it must outlive the send).
  void Send(uint64_t seq, std::span<const std::byte> payload) {
    OutgoingMessage m;
    m.header.type = kTestType;
    m.header.recipient = kReceiverNode;
    m.meta = std::to_string(seq);
    m.payload.push_back(payload);
    sender_transport_->Send(connection_, std::move(m));
  }

  base::Gauge* queued_gauge() {
    for (const auto& f : stats_.Families()) {
      if (f.name != "tandem_send_queued_bytes") continue;
      for (const auto& s : f.series) {
        if (s.labels.at("peer_role") == "server") return s.gauge;
      }
    }
    return nullptr;
  }
  double Value(const std::string& name) const { return SeriesValue(stats_, name); }
  StallingReceiver& receiver() { return receiver_; }

 private:
  base::Logger log_{"send-queue-test", 0};
  base::StatsRegistry stats_;
  SendQueueMeter meter_;
  StallingReceiver receiver_;
  Quiet quiet_;
  std::unique_ptr<TcpTransport> receiver_transport_;
  std::unique_ptr<TcpTransport> sender_transport_;
  ConnectionId connection_ = 0;
};

// The bytes a message occupies in the queue: header, meta, payload.
uint64_t QueuedSize(uint64_t seq, size_t payload) {
  return kHeaderSize + std::to_string(seq).size() + payload;
}

// Payloads, one per message, whose first byte tells them apart.
std::vector<std::vector<std::byte>> Payloads(size_t count, size_t bytes) {
  std::vector<std::vector<std::byte>> out(count, std::vector<std::byte>(bytes));
  for (size_t i = 0; i < count; ++i) {
    if (bytes) out[i][0] = static_cast<std::byte>(i & 0xff);
  }
  return out;
}

// (bound, message payload bytes)
class SendQueueBoundTest : public ::testing::TestWithParam<std::tuple<uint64_t, size_t>> {};

// A stalled receiver: the sender's queue never holds more than the bound,
// the sender waits (counted), and once the receiver reads again every
// message arrives in order and the queue is empty.
TEST_P(SendQueueBoundTest, SenderOutrunningAStalledReceiverStaysUnderTheBound) {
  const uint64_t bound = std::get<0>(GetParam());
  const size_t bytes = std::get<1>(GetParam());
  // Enough to fill the bound and the kernel's buffers several times over.
  const size_t count = std::max<size_t>(64, (4 * bound + (2 << 20)) / bytes);
  auto payloads = Payloads(count, bytes);
  BoundedPair pair(bound, kPatience);
  pair.receiver().Stall();
  base::Gauge* gauge = pair.queued_gauge();
  ASSERT_NE(gauge, nullptr);
  tandem::testing::PeakSampler sampler([gauge] { return gauge->value(); });
  std::atomic<size_t> sent{0};
  std::thread sender([&] {
    for (size_t i = 0; i < count; ++i) {
      pair.Send(i, payloads[i]);
      sent = i + 1;
    }
  });
  // The sender must get stuck: the receiver reads nothing.
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (pair.Value("tandem_send_queue_waits_total") < 1 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_GE(pair.Value("tandem_send_queue_waits_total"), 1);
  std::this_thread::sleep_for(200ms);  // the sender's loop fills the kernel's buffers
  EXPECT_LT(sent.load(), count) << "the sender queued everything although nothing was read";
  EXPECT_GT(gauge->value(), static_cast<double>(bound) - 2.0 * QueuedSize(count, bytes))
      << "the queue should be (almost) full while the receiver stalls";
  pair.receiver().Release();
  sender.join();
  ASSERT_TRUE(pair.receiver().WaitMessages(count));
  const double peak = sampler.Stop();
  EXPECT_LE(peak, static_cast<double>(bound));
  EXPECT_GT(peak, 0);
  std::vector<uint64_t> want(count);
  for (size_t i = 0; i < count; ++i) want[i] = i;
  EXPECT_EQ(pair.receiver().sequence(), want);
  auto sizes = pair.receiver().sizes();
  EXPECT_TRUE(std::all_of(sizes.begin(), sizes.end(), [&](size_t s) { return s == bytes; }));
  auto first = pair.receiver().first_bytes();
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(first[i], static_cast<std::byte>(i & 0xff)) << i;
  // Everything written: the gauge is back to zero.
  while (gauge->value() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(gauge->value(), 0);
  EXPECT_EQ(pair.Value("tandem_send_queue_wait_timeouts_total"), 0);
}

// A receiver that never reads: the sender gives up after the wait timeout
// with an error naming the peer, the bytes queued and the setting.
TEST_P(SendQueueBoundTest, WaitForAReceiverThatNeverReadsTimesOutWithAClearError) {
  const uint64_t bound = std::get<0>(GetParam());
  const size_t bytes = std::get<1>(GetParam());
  const size_t count = std::max<size_t>(64, (4 * bound + (2 << 20)) / bytes);
  auto payloads = Payloads(count, bytes);
  BoundedPair pair(bound, 300ms);
  pair.receiver().Stall();
  std::string error;
  size_t accepted = 0;
  const auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration waited{};
  for (size_t i = 0; i < count; ++i) {
    const auto before = std::chrono::steady_clock::now();
    try {
      pair.Send(i, payloads[i]);
      ++accepted;
    } catch (const Timeout& e) {
      waited = std::chrono::steady_clock::now() - before;
      error = e.what();
      break;
    }
  }
  ASSERT_FALSE(error.empty()) << "all " << count << " messages were queued in "
                              << (std::chrono::steady_clock::now() - start).count() << " ns";
  EXPECT_GE(waited, 290ms);
  EXPECT_LT(waited, 10s);
  EXPECT_THAT(error, HasSubstr("127.0.0.1"));
  EXPECT_THAT(error, HasSubstr("waited 300 ms for room in the send queue"));
  EXPECT_THAT(error, HasSubstr(std::to_string(bound) + " B allowed (TANDEM_MAX_INFLIGHT_BYTES)"));
  EXPECT_THAT(error, HasSubstr(fmt::format("sending {} B", QueuedSize(accepted, bytes))));
  EXPECT_EQ(pair.Value("tandem_send_queue_wait_timeouts_total"), 1);
  EXPECT_LE(pair.queued_gauge()->value(), static_cast<double>(bound));
  // Once the receiver reads again, what was accepted arrives, in order.
  pair.receiver().Release();
  ASSERT_TRUE(pair.receiver().WaitMessages(accepted));
  EXPECT_EQ(pair.receiver().sequence().size(), accepted);
}

// Several threads stream to one slow-ish receiver through a small bound:
// every message of every thread arrives, each thread's in its order.
TEST_P(SendQueueBoundTest, ConcurrentSendersThroughASmallBoundAllArrive) {
  const uint64_t bound = std::get<0>(GetParam());
  const size_t bytes = std::get<1>(GetParam());
  constexpr size_t kThreads = 3;
  const size_t per_thread = std::max<size_t>(32, (2 * bound) / bytes);
  auto payloads = Payloads(per_thread, bytes);
  BoundedPair pair(bound, kPatience);
  base::Gauge* gauge = pair.queued_gauge();
  tandem::testing::PeakSampler sampler([gauge] { return gauge->value(); });
  std::vector<std::thread> senders;
  for (size_t t = 0; t < kThreads; ++t) {
    senders.emplace_back([&, t] {
      for (size_t i = 0; i < per_thread; ++i) pair.Send(t * 1000000 + i, payloads[i]);
    });
  }
  for (auto& s : senders) s.join();
  ASSERT_TRUE(pair.receiver().WaitMessages(kThreads * per_thread));
  EXPECT_LE(sampler.Stop(), static_cast<double>(bound));
  std::vector<uint64_t> next(kThreads, 0);
  for (uint64_t seq : pair.receiver().sequence()) {
    const size_t t = seq / 1000000;
    ASSERT_LT(t, kThreads);
    EXPECT_EQ(seq % 1000000, next[t]) << "thread " << t;
    next[t] = seq % 1000000 + 1;
  }
  EXPECT_EQ(next, std::vector<uint64_t>(kThreads, per_thread));
}

INSTANTIATE_TEST_SUITE_P(BoundsAndSizes, SendQueueBoundTest,
                         ::testing::Values(std::make_tuple(uint64_t{256} << 10, size_t{4} << 10),
                                           std::make_tuple(uint64_t{1} << 20, size_t{64} << 10),
                                           std::make_tuple(uint64_t{4} << 20, size_t{1} << 20)),
                         [](const auto& info) {
                           return fmt::format("bound{}KiB_msg{}KiB", std::get<0>(info.param) >> 10,
                                              std::get<1>(info.param) >> 10);
                         });

// A message larger than the bound is sent when the queue is empty (else it
// could never be sent), and no second one joins it.
TEST(SendQueueBoundOversize, AMessageLargerThanTheBoundGoesAlone) {
  constexpr uint64_t kBound = 256 << 10;
  constexpr size_t kBytes = 1 << 20;
  constexpr size_t kCount = 6;
  auto payloads = Payloads(kCount, kBytes);
  BoundedPair pair(kBound, kPatience);
  pair.receiver().Stall();
  base::Gauge* gauge = pair.queued_gauge();
  tandem::testing::PeakSampler sampler([gauge] { return gauge->value(); });
  std::thread sender([&] {
    for (size_t i = 0; i < kCount; ++i) pair.Send(i, payloads[i]);
  });
  std::this_thread::sleep_for(100ms);
  pair.receiver().Release();
  sender.join();
  ASSERT_TRUE(pair.receiver().WaitMessages(kCount));
  EXPECT_LE(sampler.Stop(), static_cast<double>(QueuedSize(kCount, kBytes)));
  EXPECT_GE(pair.Value("tandem_send_queue_waits_total"), 1);
  EXPECT_EQ(pair.receiver().sequence(), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5}));
}

base::Environment Env(std::map<std::string, std::string> vars) {
  return base::Environment(std::move(vars));
}

// The environment sets the bound and the timeout; nonsense is refused.
TEST(SendQueueBoundEnvironment, ReadsAndValidatesTheVariables) {
  auto defaults = SendQueueBound::FromEnvironment(base::Environment());
  EXPECT_EQ(defaults.max_queued_bytes, uint64_t{64} << 20);
  EXPECT_EQ(defaults.wait_timeout, 120s);
  auto set = SendQueueBound::FromEnvironment(base::Environment(
      {{"TANDEM_MAX_INFLIGHT_BYTES", "1048576"}, {"TANDEM_SEND_WAIT_TIMEOUT", "2.5"}}));
  EXPECT_EQ(set.max_queued_bytes, uint64_t{1} << 20);
  EXPECT_EQ(set.wait_timeout, 2500ms);
  EXPECT_EQ(
      SendQueueBound::FromEnvironment(Env({{"TANDEM_MAX_INFLIGHT_BYTES", "0"}})).max_queued_bytes,
      0u);
  try {
    SendQueueBound::FromEnvironment(Env({{"TANDEM_MAX_INFLIGHT_BYTES", "100"}}));
    FAIL() << "a 100-byte bound was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("TANDEM_MAX_INFLIGHT_BYTES"));
    EXPECT_THAT(e.what(), HasSubstr("got 100"));
  }
  EXPECT_THROW(SendQueueBound::FromEnvironment(Env({{"TANDEM_MAX_INFLIGHT_BYTES", "-5"}})),
               ConfigError);
}

}  // namespace
}  // namespace tandem::net
