// Traffic counted where services meet the transport: messages and bytes by
// direction, peer role and service, exactly (docs/metrics.md), with a
// node's labels (cluster/traffic_labels.h) or any others a caller names.
#include "net/metered_transport.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <tuple>

#include "base/logger.h"
#include "cluster/traffic_labels.h"
#include "net/inproc_transport.h"

namespace tandem::net {
namespace {

using namespace std::chrono_literals;

// Counts deliveries; wakes a waiter.
class Sink final : public TransportHandler {
 public:
  void OnMessage(ConnectionId, Message&&) override {
    std::lock_guard lock(mu_);
    ++got_;
    cv_.notify_all();
  }
  bool WaitFor(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 10s, [&] { return got_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int got_ = 0;
};

// Node ids as the cluster numbers them with 2 servers: 0 scheduler, 1-2
// servers, 3+ workers.
const char* RoleOf(int id) {
  if (id == 0) return "scheduler";
  if (id <= 2) return "server";
  return "worker";
}

uint64_t Value(base::StatsRegistry& r, const std::string& name, const std::string& role,
               const std::string& service) {
  for (const auto& f : r.Families()) {
    if (f.name != name) continue;
    for (const auto& s : f.series) {
      if (s.labels.at("peer_role") == role && s.labels.at("service") == service) {
        return s.counter->value();
      }
    }
  }
  ADD_FAILURE() << "no series " << name << " " << role << " " << service;
  return 0;
}

// (recipient node id, message type, meta bytes, payload bytes, role, service)
using Case = std::tuple<int, uint16_t, size_t, size_t, const char*, const char*>;

class MeteredTransportTest : public ::testing::TestWithParam<Case> {};

TEST_P(MeteredTransportTest, CountsBothEndsByRoleAndService) {
  const int peer = std::get<0>(GetParam());
  const uint16_t type = std::get<1>(GetParam());
  const size_t meta = std::get<2>(GetParam());
  const size_t payload = std::get<3>(GetParam());
  const char* role = std::get<4>(GetParam());
  const char* service = std::get<5>(GetParam());
  base::Logger log("test", 0);
  InProcNetwork network;
  TransportOptions o;
  o.job_id = "metered";
  o.secret = "s";
  base::StatsRegistry sender_stats, receiver_stats;
  TrafficMeter sender_meter(sender_stats, cluster::NodeTrafficLabels(RoleOf));
  TrafficMeter receiver_meter(receiver_stats, cluster::NodeTrafficLabels(RoleOf));
  Sink sender_sink, receiver_sink;
  MeteredTransport sender(sender_meter, &sender_sink), receiver(receiver_meter, &receiver_sink);
  sender.SetInner(std::make_unique<InProcTransport>(network, o, &sender, log));
  receiver.SetInner(std::make_unique<InProcTransport>(network, o, &receiver, log));
  Endpoint at = receiver.Listen({"r", 0});
  ConnectionId conn = sender.Connect(at, 10s);
  std::vector<std::byte> bytes(payload, std::byte{7});
  const int kMessages = 3;
  for (int i = 0; i < kMessages; ++i) {
    OutgoingMessage m;
    m.header.type = type;
    m.header.sender = 4;  // a worker
    m.header.recipient = peer;
    m.meta = std::string(meta, 'm');
    if (payload) m.payload.push_back(bytes);
    sender.Send(conn, std::move(m));
  }
  ASSERT_TRUE(receiver_sink.WaitFor(kMessages));
  const uint64_t each = kHeaderSize + meta + payload;
  EXPECT_EQ(Value(sender_stats, "tandem_sent_messages_total", role, service), kMessages);
  EXPECT_EQ(Value(sender_stats, "tandem_sent_bytes_total", role, service), kMessages * each);
  EXPECT_EQ(Value(receiver_stats, "tandem_received_messages_total", "worker", service), kMessages);
  EXPECT_EQ(Value(receiver_stats, "tandem_received_bytes_total", "worker", service),
            kMessages * each);
  // Nothing counted under another role.
  for (const char* other : {"scheduler", "server", "worker", "unknown"}) {
    if (std::string(other) == role) continue;
    EXPECT_EQ(Value(sender_stats, "tandem_sent_messages_total", other, service), 0u) << other;
  }
  sender.Shutdown();
  receiver.Shutdown();
}

INSTANTIATE_TEST_SUITE_P(
    RolesAndServices, MeteredTransportTest,
    ::testing::Values(Case{0, msgtype::kClusterFirst + 1, 10, 0, "scheduler", "cluster"},
                      Case{2, msgtype::kKvFirst + 1, 40, 4096, "server", "kv"},
                      Case{7, msgtype::kCollectiveFirst + 3, 0, 100000, "worker", "collective"},
                      Case{-1, msgtype::kClusterFirst, 5, 0, "unknown", "cluster"}));

// A caller's own labels: the net layer counts by them, whatever they name.
// (node id parity, message type's low bit) -> (peer_role, service).
using OwnLabelsCase = std::tuple<int, uint16_t, const char*, const char*>;

class TrafficMeterOwnLabelsTest : public ::testing::TestWithParam<OwnLabelsCase> {};

TEST_P(TrafficMeterOwnLabelsTest, CountsByTheCallersLabels) {
  const auto [peer, type, role, service] = GetParam();
  TrafficLabels labels;
  labels.peer_roles = {"even", "odd", "none"};
  labels.peer_role_of = [](int id) { return id < 0 ? size_t{2} : static_cast<size_t>(id % 2); };
  labels.services = {"low", "high"};
  labels.service_of = [](uint16_t t) { return static_cast<size_t>(t & 1); };
  base::StatsRegistry stats;
  TrafficMeter meter(stats, labels);
  Header h;
  h.type = type;
  h.recipient = peer;
  h.sender = peer;
  meter.Sent(h, 100);
  meter.Received(h, 30);
  for (const char* r : {"even", "odd", "none"}) {
    for (const char* s : {"low", "high"}) {
      const bool hit = std::string(r) == role && std::string(s) == service;
      EXPECT_EQ(Value(stats, "tandem_sent_messages_total", r, s), hit ? 1u : 0u) << r << " " << s;
      EXPECT_EQ(Value(stats, "tandem_sent_bytes_total", r, s), hit ? 100u : 0u) << r << " " << s;
      EXPECT_EQ(Value(stats, "tandem_received_bytes_total", r, s), hit ? 30u : 0u) << r << " " << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ParityLabels, TrafficMeterOwnLabelsTest,
                         ::testing::Values(OwnLabelsCase{4, 200, "even", "low"},
                                           OwnLabelsCase{3, 65, "odd", "high"},
                                           OwnLabelsCase{-1, 64, "none", "low"}));

TEST(StatsRegistryRefresh, RunsRefreshersBeforeReading) {
  base::StatsRegistry r;
  auto& g = r.GetGauge("tandem_test_age_seconds", "An age.");
  int calls = 0;
  r.AddRefresher([&] { g.Set(++calls * 1.5); });
  r.Refresh();
  r.Refresh();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(g.value(), 3.0);
}

}  // namespace
}  // namespace tandem::net
