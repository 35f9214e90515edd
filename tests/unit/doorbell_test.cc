// base::Doorbell: a sleeper wakes when the counter moves (also when it moved
// before the sleep began), and not before its deadline otherwise.
#include "base/doorbell.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace tandem::base {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TEST(DoorbellTest, SleepEndsAtTheDeadlineWhenNothingRings) {
  Doorbell bell;
  const uint32_t seen = bell.Value();
  const auto start = Clock::now();
  EXPECT_FALSE(bell.Sleep(seen, start + milliseconds(60)));
  EXPECT_GE(Clock::now() - start, milliseconds(60));
  EXPECT_EQ(bell.Value(), seen);
}

TEST(DoorbellTest, ARingBeforeTheSleepIsNotLost) {
  Doorbell bell;
  const uint32_t seen = bell.Value();
  bell.Ring();
  const auto start = Clock::now();
  EXPECT_TRUE(bell.Sleep(seen, start + std::chrono::seconds(10)));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(bell.Value(), seen + 1);
}

TEST(DoorbellTest, APastDeadlineReportsWhetherTheCounterMoved) {
  Doorbell bell;
  const uint32_t seen = bell.Value();
  EXPECT_FALSE(bell.Sleep(seen, Clock::now() - milliseconds(1)));
  bell.Ring();
  EXPECT_TRUE(bell.Sleep(seen, Clock::now() - milliseconds(1)));
}

// Several sleepers on words the test owns (as in shared memory), woken by
// rings from other threads; every round's change is seen by every sleeper.
class DoorbellWakeTest : public ::testing::TestWithParam<int> {};

TEST_P(DoorbellWakeTest, EverySleeperSeesEveryRound) {
  const int sleepers = GetParam();
  constexpr int kRounds = 200;
  DoorbellWords words;
  Doorbell bell(&words);
  std::atomic<int> published{0};
  std::vector<int> seen_rounds(static_cast<size_t>(sleepers), 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < sleepers; ++t) {
    threads.emplace_back([&, t] {
      const auto deadline = Clock::now() + std::chrono::seconds(30);
      int got = 0;
      while (got < kRounds && Clock::now() < deadline) {
        const uint32_t v = bell.Value();
        got = published.load();
        if (got >= kRounds) break;
        bell.Sleep(v, deadline);
      }
      seen_rounds[static_cast<size_t>(t)] = got;
    });
  }
  for (int r = 1; r <= kRounds; ++r) {
    published.store(r);
    bell.Ring();
    if (r % 50 == 0) std::this_thread::sleep_for(milliseconds(1));
  }
  for (auto& t : threads) t.join();
  for (int t = 0; t < sleepers; ++t) EXPECT_EQ(seen_rounds[static_cast<size_t>(t)], kRounds) << t;
  EXPECT_EQ(words.counter.load(), static_cast<uint32_t>(kRounds));
  EXPECT_EQ(words.sleepers.load(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Sleepers, DoorbellWakeTest, ::testing::Values(1, 2, 4));

}  // namespace
}  // namespace tandem::base
