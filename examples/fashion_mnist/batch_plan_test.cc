// The sharding of global batches among workers and the learning-rate rule.
#include "batch_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <tuple>

#include "learning_rate.h"
#include "tandem/error.h"

namespace fashion_mnist {
namespace {

// (examples, workers, batch per worker)
class BatchPlanTest : public ::testing::TestWithParam<std::tuple<int64_t, int, int64_t>> {};

// The workers' parts of a step are disjoint and together are exactly the
// batch one worker with the global batch takes at that step.
TEST_P(BatchPlanTest, PartsOfAStepAreTheSingleWorkersBatch) {
  const int64_t examples = std::get<0>(GetParam());
  const int workers = std::get<1>(GetParam());
  const int64_t batch = std::get<2>(GetParam());
  const BatchPlan single(examples, 1, 0, batch * workers, {}, 7);
  for (int epoch = 0; epoch < 2; ++epoch) {
    const std::vector<int64_t> order = single.EpochOrder(epoch);
    for (int64_t step = 0; step < single.steps_per_epoch(); ++step) {
      std::vector<int64_t> joined;
      for (int r = 0; r < workers; ++r) {
        const BatchPlan plan(examples, workers, r, batch, {}, 7);
        ASSERT_EQ(plan.steps_per_epoch(), examples / (batch * workers));
        ASSERT_EQ(plan.EpochOrder(epoch), order);
        const std::vector<int64_t> part = plan.LocalBatch(order, step);
        ASSERT_EQ(static_cast<int64_t>(part.size()), batch);
        joined.insert(joined.end(), part.begin(), part.end());
      }
      ASSERT_EQ(joined, single.LocalBatch(order, step)) << "epoch " << epoch << " step " << step;
    }
  }
}

// An epoch's order is a permutation, differs between epochs and seeds, and
// every worker's parts over an epoch are disjoint.
TEST_P(BatchPlanTest, EpochShardsAreDisjoint) {
  const int64_t examples = std::get<0>(GetParam());
  const int workers = std::get<1>(GetParam());
  const int64_t batch = std::get<2>(GetParam());
  const BatchPlan plan0(examples, workers, 0, batch, {}, 3);
  const std::vector<int64_t> order = plan0.EpochOrder(0);
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(static_cast<size_t>(examples));
  std::iota(iota.begin(), iota.end(), int64_t{0});
  EXPECT_EQ(sorted, iota);
  EXPECT_NE(order, plan0.EpochOrder(1));
  EXPECT_NE(order, BatchPlan(examples, workers, 0, batch, {}, 4).EpochOrder(0));
  std::set<int64_t> seen;
  for (int r = 0; r < workers; ++r) {
    const BatchPlan plan(examples, workers, r, batch, {}, 3);
    for (int64_t step = 0; step < plan.steps_per_epoch(); ++step) {
      for (int64_t i : plan.LocalBatch(order, step)) EXPECT_TRUE(seen.insert(i).second) << i;
    }
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), plan0.steps_per_epoch() * batch * workers);
}

INSTANTIATE_TEST_SUITE_P(Sizes, BatchPlanTest,
                         ::testing::Combine(::testing::Values(int64_t{100}, int64_t{1000}),
                                            ::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(int64_t{1}, int64_t{8})));

TEST(BatchPlanWorkload, SplitsTheGlobalBatchInProportion) {
  // 4 workers x 16 = 64 examples per step, weights 1:1:2:4 -> 1 + 63 * w / 8.
  const std::vector<double> workload = {1, 1, 2, 4};
  const BatchPlan plan(1000, 4, 2, 16, workload, 1);
  EXPECT_EQ(plan.global_batch(), 64);
  // exact shares of the 60 left after one each: 7.5, 7.5, 15, 30; floors 7, 7,
  // 15, 30 leave 1, which goes to the largest remainder, the lower rank first.
  EXPECT_EQ(plan.batches(), (std::vector<int64_t>{9, 8, 16, 31}));
  EXPECT_EQ(plan.local_batch(), 16);
  const std::vector<int64_t> order = plan.EpochOrder(0);
  const std::vector<int64_t> part = plan.LocalBatch(order, 1);
  EXPECT_EQ(part, std::vector<int64_t>(order.begin() + 64 + 17, order.begin() + 64 + 33));
}

TEST(BatchPlanWorkload, RejectsBadInput) {
  EXPECT_THROW(BatchPlan(100, 2, 2, 8, {}, 1), tandem::InvalidArgument);
  EXPECT_THROW(BatchPlan(100, 3, 0, 8, {1, 2}, 1), tandem::InvalidArgument);
  EXPECT_THROW(BatchPlan(100, 2, 0, 8, {1, 0}, 1), tandem::InvalidArgument);
  EXPECT_THROW(BatchPlan(100, 2, 0, 64, {}, 1), tandem::InvalidArgument);
  try {
    BatchPlan(100, 3, 0, 8, {1, 2}, 1);
  } catch (const tandem::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("2 weights for 3 workers"), std::string::npos) << e.what();
  }
}

TEST(LearningRate, LinearWarmupToTheScaledRate) {
  LearningRate rate;
  rate.base = 0.1;
  rate.scale = 4;
  rate.warmup_steps = 10;
  EXPECT_DOUBLE_EQ(rate.At(0), 0.1);
  EXPECT_DOUBLE_EQ(rate.At(5), 0.1 + 0.3 * 5 / 10);
  EXPECT_DOUBLE_EQ(rate.At(10), 0.4);
  EXPECT_DOUBLE_EQ(rate.At(1000), 0.4);
  const tandem::KVParams p = rate.ServerSgdParams(0.9, 0, 1);
  EXPECT_EQ(p.at("learning_rate"), "0.40000000000000002");
  EXPECT_EQ(p.at("lr_scheduler.warmup_steps"), "10");
  EXPECT_EQ(p.at("lr_scheduler.warmup_begin_lr"), "0.10000000000000001");
  EXPECT_EQ(rate.ServerSgdParams(0.9, 0, 4).at("lr_scheduler.warmup_steps"), "40");
  rate.warmup_steps = 0;
  EXPECT_EQ(rate.ServerSgdParams(0.9, 0, 1).count("lr_scheduler"), 0u);
  EXPECT_DOUBLE_EQ(rate.At(1), 0.4);
}

}  // namespace
}  // namespace fashion_mnist
