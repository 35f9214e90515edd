// Key placement: MXNet's rule, slice by slice.
#include "kv/key_placement.h"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

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
