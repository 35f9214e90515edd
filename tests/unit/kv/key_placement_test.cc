// Key placement: MXNet's rule, slice by slice; shares and the balanced split.
#include "kv/key_placement.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "tandem/error.h"

namespace tandem::kv {
namespace {

// (elements, row_length, servers, bound)
class Placement : public ::testing::TestWithParam<std::tuple<uint64_t, uint64_t, int, uint64_t>> {};

TEST_P(Placement, FollowsMxnetsRule) {
  auto [elements, row, servers, bound] = GetParam();
  for (uint64_t key : {0ull, 1ull, 7ull, 12345ull}) {
    auto slices = PlaceKey(key, elements, row, servers, bound);
    if (elements < bound || elements == 0) {
      ASSERT_EQ(slices.size(), 1u);
      EXPECT_EQ(slices[0].server, static_cast<int>((key * 9973) % static_cast<uint64_t>(servers)));
      EXPECT_EQ(slices[0].offset, 0u);
      EXPECT_EQ(slices[0].count, elements);
      continue;
    }
    // Contiguous, in server order, covering everything, whole rows, and
    // each slice as MXNet computes it: round(n/S*(i+1)) - round(n/S*i).
    const uint64_t rows = elements / row;
    uint64_t next = 0;
    int last_server = -1;
    for (const auto& s : slices) {
      EXPECT_GT(s.server, last_server);
      last_server = s.server;
      EXPECT_EQ(s.offset, next);
      EXPECT_EQ(s.count % row, 0u);
      const double per = static_cast<double>(rows) / servers;
      auto want = static_cast<uint64_t>(std::round(per * (s.server + 1))) -
                  static_cast<uint64_t>(std::round(per * s.server));
      EXPECT_EQ(s.count, want * row) << "server " << s.server;
      next += s.count;
    }
    EXPECT_EQ(next, elements);
    if (rows >= static_cast<uint64_t>(servers)) {
      EXPECT_EQ(slices.size(), static_cast<size_t>(servers));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Placement,
                         ::testing::Values(std::tuple{10ull, 1ull, 1, 1000000ull},
                                           std::tuple{999999ull, 1ull, 2, 1000000ull},
                                           std::tuple{1000000ull, 1ull, 2, 1000000ull},
                                           std::tuple{1000001ull, 1ull, 3, 1000000ull},
                                           std::tuple{7ull, 1ull, 3, 5ull},
                                           std::tuple{100ull, 10ull, 3, 50ull},
                                           std::tuple{30ull, 10ull, 4, 1ull},
                                           std::tuple{0ull, 1ull, 2, 1ull},
                                           std::tuple{30000000ull, 1ull, 2, 1000000ull}));

TEST(Placement, RejectsBadInput) {
  EXPECT_THROW(PlaceKey(1, 10, 1, 0, 5), InvalidArgument);
  EXPECT_THROW(PlaceKey(1, 10, 3, 2, 5), InvalidArgument);
  EXPECT_THROW(PlaceKey(1, 10, 0, 2, 5), InvalidArgument);
}

}  // namespace
}  // namespace tandem::kv

namespace tandem::kv {
namespace {

// (elements, values per word, servers, bound)
class CompressedPlacement
    : public ::testing::TestWithParam<std::tuple<uint64_t, uint64_t, int, uint64_t>> {};

TEST_P(CompressedPlacement, SlicesOnWholeWordsAsMxnet) {
  auto [elements, per_word, servers, bound] = GetParam();
  auto slices = PlaceCompressedKey(5, elements, per_word, servers, bound);
  if (elements < bound) {
    ASSERT_EQ(slices.size(), 1u);
    EXPECT_EQ(slices[0].server, static_cast<int>((5 * 9973) % servers));
    return;
  }
  const uint64_t words = (elements + per_word - 1) / per_word;
  uint64_t next = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    EXPECT_EQ(slices[i].offset, next);
    EXPECT_EQ(slices[i].offset % per_word, 0u);
    if (static_cast<int>(i) + 1 < servers) {
      const double per = static_cast<double>(words) / servers;
      auto w = static_cast<uint64_t>(std::round(per * (i + 1))) -
               static_cast<uint64_t>(std::round(per * i));
      EXPECT_EQ(slices[i].count, w * per_word);
    }
    next += slices[i].count;
  }
  EXPECT_EQ(next, elements);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CompressedPlacement,
                         ::testing::Values(std::tuple{100ull, 16ull, 2, 40ull},
                                           std::tuple{1000ull, 32ull, 3, 40ull},
                                           std::tuple{39ull, 16ull, 2, 40ull},
                                           std::tuple{1000001ull, 16ull, 2, 1000000ull},
                                           std::tuple{1000ull, 16ull, 1, 10ull}));

}  // namespace
}  // namespace tandem::kv

namespace tandem::kv {
namespace {

// (elements, row_length, shares): a large key cut in proportion to shares.
class WeightedPlacement
    : public ::testing::TestWithParam<std::tuple<uint64_t, uint64_t, std::vector<double>>> {};

TEST_P(WeightedPlacement, CutsInProportionToTheShares) {
  auto [elements, row, shares] = GetParam();
  const int servers = static_cast<int>(shares.size());
  double total = 0;
  for (double s : shares) total += s;
  auto slices = PlaceKey(3, elements, row, servers, 10, shares);
  const uint64_t rows = elements / row;
  uint64_t next = 0;
  double cumulative = 0;
  size_t at = 0;
  for (int i = 0; i < servers; ++i) {
    const double before = cumulative;
    cumulative += shares[static_cast<size_t>(i)];
    const auto begin = static_cast<uint64_t>(std::round(rows * before / total));
    const auto end =
        i + 1 == servers ? rows : static_cast<uint64_t>(std::round(rows * cumulative / total));
    if (end == begin) continue;  // a server with no rows gets no slice
    ASSERT_LT(at, slices.size());
    EXPECT_EQ(slices[at].server, i);
    EXPECT_EQ(slices[at].offset, next);
    EXPECT_EQ(slices[at].count, (end - begin) * row) << "server " << i;
    next += slices[at].count;
    ++at;
  }
  EXPECT_EQ(at, slices.size());
  EXPECT_EQ(next, elements);
}

INSTANTIATE_TEST_SUITE_P(
    Shares, WeightedPlacement,
    ::testing::Values(std::tuple{1200ull, 1ull,
                                 std::vector<double>{1.0 / 6, 1.0 / 6, 1.0 / 6, 1.0 / 6, 1.0 / 3}},
                      std::tuple{1000ull, 10ull, std::vector<double>{0.1, 0.1, 0.1, 0.1, 0.3, 0.3}},
                      std::tuple{800ull, 1ull, std::vector<double>{0, 0, 0, 0, 1, 1, 1, 1}},
                      std::tuple{17ull, 1ull, std::vector<double>{1, 5, 1}},
                      std::tuple{1000003ull, 1ull, std::vector<double>{2, 1}}));

TEST(WeightedPlacement, EqualSharesPlaceAsMxnet) {
  const std::vector<double> equal(3, 0.25);
  for (uint64_t elements : {5ull, 1000ull, 1000001ull, 2999999ull}) {
    for (uint64_t key : {0ull, 4ull, 99ull}) {
      auto a = PlaceKey(key, elements, 1, 3, 100, equal);
      auto b = PlaceKey(key, elements, 1, 3, 100);
      ASSERT_EQ(a.size(), b.size()) << elements;
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].server, b[i].server);
        EXPECT_EQ(a[i].offset, b[i].offset);
        EXPECT_EQ(a[i].count, b[i].count);
      }
    }
  }
}

TEST(WeightedPlacement, SmallKeysSkipServersWithoutAShare) {
  const std::vector<double> shares{0, 0.5, 0, 0.5};
  for (uint64_t key = 0; key < 50; ++key) {
    auto s = PlaceKey(key, 4, 1, 4, 100, shares);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].server, key * 9973 % 2 == 0 ? 1 : 3) << "key " << key;
  }
}

TEST(WeightedPlacement, CompressedKeysCutOnWholeWords) {
  const std::vector<double> shares{1, 1, 2};
  auto slices = PlaceCompressedKey(1, 1000, 16, 3, 10, shares);
  // 63 words: 15.75 / 31.5 / 63 -> ends at words 16 and 32.
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(slices[0].count, 16u * 16);
  EXPECT_EQ(slices[1].offset, 16u * 16);
  EXPECT_EQ(slices[1].count, 16u * 16);
  EXPECT_EQ(slices[2].offset, 32u * 16);
  EXPECT_EQ(slices[2].count, 1000u - 32 * 16);
}

TEST(WeightedPlacement, RejectsBadShares) {
  EXPECT_THROW(PlaceKey(1, 100, 1, 2, 5, std::vector<double>{1.0}), InvalidArgument);
  EXPECT_THROW(PlaceKey(1, 100, 1, 2, 5, std::vector<double>{1.0, -1.0}), InvalidArgument);
  EXPECT_THROW(PlaceKey(1, 100, 1, 2, 5, std::vector<double>{0.0, 0.0}), InvalidArgument);
  EXPECT_THROW(PlaceKey(1, 100, 1, 2, 5, std::vector<double>{1.0, std::nan("")}), InvalidArgument);
  try {
    PlaceKey(7, 100, 1, 2, 5, std::vector<double>{1.0, -1.0});
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("key 7: server 1's share is -1"), std::string::npos)
        << e.what();
  }
}

// (workers, spare servers): n workers on hosts w0..w{n-1}, each with a
// server beside it, and k servers on hosts s0..s{k-1}.
class Balanced : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(Balanced, EqualisesTheLinksAsBytePsFormula) {
  auto [n, k] = GetParam();
  std::vector<std::string> workers, servers;
  for (int i = 0; i < n; ++i) workers.push_back(fmt::format("10.0.0.{}", i + 1));
  servers = workers;
  for (int i = 0; i < k; ++i) servers.push_back(fmt::format("10.0.1.{}", i + 1));
  auto shares = BalancedShares(servers, workers);
  ASSERT_EQ(shares.size(), static_cast<size_t>(n + k));
  double sum = 0;
  for (double s : shares) sum += s;
  EXPECT_NEAR(sum, 1.0, 1e-12);
  const double x = shares[0], y = shares[static_cast<size_t>(n)];
  for (int i = 0; i < n; ++i) EXPECT_DOUBLE_EQ(shares[static_cast<size_t>(i)], x);
  // Link loads (key sizes each way): a worker's host 1 + (n - 2) x, a
  // spare server's host n y; equal when k <= n, and then the ring's
  // 2 (n - 1) / n over it is BytePS's 1 + k (n - 2) / n^2.
  const double worker_link = 1 + (n - 2) * x, spare_link = n * y;
  if (k <= n) {
    EXPECT_NEAR(worker_link, spare_link, 1e-12);
    EXPECT_NEAR(2.0 * (n - 1) / n / worker_link, 1.0 + k * (n - 2.0) / (n * n), 1e-12);
  } else {
    EXPECT_EQ(x, 0.0);  // every byte through the spare servers
    EXPECT_NEAR(y, 1.0 / k, 1e-12);
  }
}

INSTANTIATE_TEST_SUITE_P(WorkersAndSpares, Balanced,
                         ::testing::Values(std::tuple{4, 1}, std::tuple{4, 2}, std::tuple{4, 4},
                                           std::tuple{4, 6}, std::tuple{8, 3}, std::tuple{2, 1},
                                           std::tuple{3, 2}));

TEST(Balanced, FourWorkersAndOneSpareServer) {
  std::vector<std::string> workers{"h1", "h2", "h3", "h4"};
  auto shares = BalancedShares({"h1", "h2", "h3", "h4", "h5"}, workers);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(shares[static_cast<size_t>(i)], 1.0 / 6, 1e-15);
  EXPECT_NEAR(shares[4], 1.0 / 3, 1e-15);
}

TEST(Balanced, OneKindOfServerOrOneWorkerIsAnEqualCut) {
  EXPECT_EQ(BalancedShares({"a", "b"}, {"a", "b", "c"}), (std::vector<double>{0.5, 0.5}));
  EXPECT_EQ(BalancedShares({"s1", "s2"}, {"a", "b"}), (std::vector<double>{0.5, 0.5}));
  EXPECT_EQ(BalancedShares({"a", "s1"}, {"a"}), (std::vector<double>{0.5, 0.5}));
  EXPECT_THROW(BalancedShares({}, {"a"}), InvalidArgument);
  EXPECT_THROW(BalancedShares({"a"}, {}), InvalidArgument);
}

}  // namespace
}  // namespace tandem::kv
