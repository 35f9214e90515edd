// Counters, gauges, histograms and their registry: exact under concurrency,
// names and kinds checked.
#include "base/stats.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "tandem/error.h"

namespace tandem::base {
namespace {

class ConcurrentCounting : public ::testing::TestWithParam<int> {};

TEST_P(ConcurrentCounting, EveryAddIsCounted) {
  StatsRegistry registry;
  Counter& c = registry.GetCounter("tandem_test_total", "a test counter");
  Gauge& g = registry.GetGauge("tandem_test_depth", "a test gauge");
  Histogram& h = registry.GetHistogram("tandem_test_seconds", "a test histogram", {}, {1, 2, 3});
  const int threads = GetParam();
  constexpr int kPerThread = 20000;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        c.Add(2);
        g.Add(1);
        h.Observe(static_cast<double>((t + i) % 4));  // 0, 1, 2, 3 in turn
      }
    });
  }
  for (auto& w : workers) w.join();
  const uint64_t n = static_cast<uint64_t>(threads) * kPerThread;
  EXPECT_EQ(c.value(), 2 * n);
  EXPECT_EQ(g.value(), static_cast<double>(n));
  auto snap = h.Read();
  EXPECT_EQ(snap.count, n);
  // Each value 0..3 appears n/4 times; buckets are le=1, le=2, le=3, +Inf.
  EXPECT_EQ(snap.cumulative, (std::vector<uint64_t>{n / 2, 3 * n / 4, n, n}));
  EXPECT_DOUBLE_EQ(snap.sum, static_cast<double>(n / 4 * (0 + 1 + 2 + 3)));
}

INSTANTIATE_TEST_SUITE_P(Threads, ConcurrentCounting, ::testing::Values(1, 2, 4, 8));

TEST(StatsRegistry, SameNameAndLabelsGiveTheSameMetric) {
  StatsRegistry r;
  Counter& a = r.GetCounter("tandem_bytes_sent_total", "bytes", {{"peer_role", "server"}});
  Counter& b = r.GetCounter("tandem_bytes_sent_total", "bytes", {{"peer_role", "server"}});
  Counter& other = r.GetCounter("tandem_bytes_sent_total", "bytes", {{"peer_role", "worker"}});
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &other);
  auto families = r.Families();
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].series.size(), 2u);
}

TEST(StatsRegistry, RejectsBadNamesAndKindClashes) {
  StatsRegistry r;
  r.GetCounter("tandem_x_total", "x");
  EXPECT_THROW(r.GetGauge("tandem_x_total", "x"), InvalidArgument);
  EXPECT_THROW(r.GetCounter("tandem_x_total", "another help"), InvalidArgument);
  for (const char* bad : {"", "1abc", "has-dash", "sp ace"}) {
    EXPECT_THROW(r.GetCounter(bad, "h"), InvalidArgument) << bad;
  }
}

TEST(Histogram, RejectsUnorderedBounds) {
  EXPECT_THROW(Histogram({1, 1}), InvalidArgument);
  EXPECT_THROW(Histogram({2, 1}), InvalidArgument);
  auto b = Histogram::LatencyBuckets();
  EXPECT_NO_THROW(Histogram{b});
  EXPECT_DOUBLE_EQ(b.front(), 1e-5);
  EXPECT_DOUBLE_EQ(b.back(), 100);
}

}  // namespace
}  // namespace tandem::base
