// The learning-rate schedules against MXNet 1.9's lr_scheduler.py, as closed
// forms evaluated here in double in Python's order of operations.
#include "kv/optimizer/lr_scheduler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numbers>
#include <string>
#include <vector>

#include "kv/optimizer/optimizer_params.h"
#include "tandem/error.h"

namespace tandem::kv {
namespace {

std::unique_ptr<LrScheduler> Make(const OptimizerParams& params, double learning_rate) {
  OptimizerParamReader reader(params, "test");
  auto s = LrScheduler::Create(reader, learning_rate);
  reader.Finish();
  return s;
}

struct ScheduleCase {
  std::string label;
  OptimizerParams params;
  double learning_rate;                   // the optimizer's
  std::vector<int64_t> updates;           // num_update sequence fed in
  std::function<double(int64_t)> closed;  // MXNet's formula for each
};

void PrintTo(const ScheduleCase& c, std::ostream* os) { *os << c.label; }

std::vector<ScheduleCase> Cases() {
  const auto seq = [](int64_t from, int64_t to) {
    std::vector<int64_t> v;
    for (int64_t i = from; i <= to; ++i) v.push_back(i);
    return v;
  };
  return {
      {"factor",
       {{"lr_scheduler", "factor"}, {"lr_scheduler.step", "2"}, {"lr_scheduler.factor", "0.5"}},
       1.0,
       seq(1, 9),
       // base_lr * factor^floor((n - 1) / step) for n >= 1
       [](int64_t n) { return std::pow(0.5, static_cast<double>((n - 1) / 2)); }},
      {"factor_stop",
       {{"lr_scheduler", "factor"},
        {"lr_scheduler.step", "1"},
        {"lr_scheduler.factor", "0.1"},
        {"lr_scheduler.stop_factor_lr", "0.05"}},
       1.0,
       seq(1, 6),
       [](int64_t n) { return n == 1 ? 1.0 : (n == 2 ? 0.1 : 0.05); }},
      {"factor_linear_warmup",
       {{"lr_scheduler", "factor"},
        {"lr_scheduler.step", "3"},
        {"lr_scheduler.factor", "0.5"},
        {"lr_scheduler.base_lr", "0.5"},
        {"lr_scheduler.warmup_steps", "4"},
        {"lr_scheduler.warmup_begin_lr", "0.1"}},
       2.0,  // replaces base_lr after warm-up, as MXNet's Optimizer does
       seq(0, 12),
       [](int64_t n) {
         if (n < 4) return 0.1 + (0.5 - 0.1) * static_cast<double>(n) / 4.0;
         return 2.0 * std::pow(0.5, static_cast<double>(n > 3 ? (n - 1) / 3 : 0));
       }},
      {"multifactor_constant_warmup",
       {{"lr_scheduler", "multifactor"},
        {"lr_scheduler.step", "3,6,8"},
        {"lr_scheduler.factor", "0.25"},
        {"lr_scheduler.warmup_steps", "2"},
        {"lr_scheduler.warmup_begin_lr", "0.001"},
        {"lr_scheduler.warmup_mode", "constant"}},
       1.0,
       seq(0, 10),
       [](int64_t n) {
         if (n < 2) return 0.001;
         const int passed = (n > 3) + (n > 6) + (n > 8);
         return std::pow(0.25, passed);
       }},
      {"poly",
       {{"lr_scheduler", "poly"},
        {"lr_scheduler.max_update", "10"},
        {"lr_scheduler.base_lr", "2"},
        {"lr_scheduler.pwr", "2"}},
       7.0,
       seq(0, 10),
       [](int64_t n) {
         return 0.0 + (2.0 - 0.0) * std::pow(1 - static_cast<double>(n) / 10.0, 2.0);
       }},
      {"poly_warmup_final",
       {{"lr_scheduler", "poly"},
        {"lr_scheduler.max_update", "12"},
        {"lr_scheduler.base_lr", "1"},
        {"lr_scheduler.pwr", "1"},
        {"lr_scheduler.final_lr", "0.25"},
        {"lr_scheduler.warmup_steps", "2"}},
       1.0,
       seq(0, 12),
       [](int64_t n) {
         if (n < 2) return 0.0 + (1.0 - 0.0) * static_cast<double>(n) / 2.0;
         return 0.25 + (1.0 - 0.25) * std::pow(1 - static_cast<double>(n - 2) / 10.0, 1.0);
       }},
      {"cosine",
       {{"lr_scheduler", "cosine"},
        {"lr_scheduler.max_update", "8"},
        {"lr_scheduler.base_lr", "1"},
        {"lr_scheduler.final_lr", "0.125"}},
       1.0,
       seq(0, 8),
       [](int64_t n) {
         return 0.125 +
                (1.0 - 0.125) * (1 + std::cos(std::numbers::pi * static_cast<double>(n) / 8.0)) / 2;
       }},
  };
}

class LrScheduleMatchesMxnet : public ::testing::TestWithParam<ScheduleCase> {};

TEST_P(LrScheduleMatchesMxnet, EveryUpdate) {
  const ScheduleCase& c = GetParam();
  auto s = Make(c.params, c.learning_rate);
  ASSERT_NE(s, nullptr);
  for (int64_t n : c.updates) {
    EXPECT_EQ(s->Rate(n), c.closed(n)) << c.label << " at num_update " << n;
  }
}

INSTANTIATE_TEST_SUITE_P(All, LrScheduleMatchesMxnet, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<ScheduleCase>& param_info) {
                           return param_info.param.label;
                         });

TEST(LrSchedule, HandCheckedConstants) {
  auto factor = Make(
      {{"lr_scheduler", "factor"}, {"lr_scheduler.step", "2"}, {"lr_scheduler.factor", "0.5"}}, 1);
  EXPECT_EQ(factor->Rate(2), 1.0);
  EXPECT_EQ(factor->Rate(3), 0.5);
  EXPECT_EQ(factor->Rate(5), 0.25);
  auto poly = Make(
      {{"lr_scheduler", "poly"}, {"lr_scheduler.max_update", "10"}, {"lr_scheduler.base_lr", "2"}},
      1);
  EXPECT_EQ(poly->Rate(5), 0.5);
  EXPECT_EQ(poly->Rate(10), 0.0);
  EXPECT_EQ(poly->Rate(11), 0.0);  // keeps the last value after max_update
  auto cosine = Make(
      {{"lr_scheduler", "cosine"}, {"lr_scheduler.max_update", "4"}, {"lr_scheduler.base_lr", "1"}},
      1);
  EXPECT_EQ(cosine->Rate(0), 1.0);
  EXPECT_EQ(cosine->Rate(4), 0.0);
}

TEST(LrSchedule, JumpsAcrossSeveralStepsAtOnce) {
  // MXNet loops ("for continuing training via load_epoch").
  auto multi = Make({{"lr_scheduler", "multifactor"},
                     {"lr_scheduler.step", "[2, 4, 6]"},
                     {"lr_scheduler.factor", "0.5"}},
                    1);
  EXPECT_EQ(multi->Rate(100), 0.125);
  auto factor = Make(
      {{"lr_scheduler", "factor"}, {"lr_scheduler.step", "10"}, {"lr_scheduler.factor", "0.5"}}, 8);
  EXPECT_EQ(factor->Rate(35), 1.0);
}

TEST(LrSchedule, FactorFixedPointsSkipAheadInsteadOfLooping) {
  // MXNet loops once per step; at a fixed point (factor 1, or clamped at
  // stop_factor_lr) tandem jumps, so a huge num_update returns at once.
  auto flat = Make({{"lr_scheduler", "factor"}, {"lr_scheduler.step", "1"}}, 0.3);
  EXPECT_EQ(flat->Rate(int64_t{1} << 60), 0.3);
  auto clamped = Make({{"lr_scheduler", "factor"},
                       {"lr_scheduler.step", "3"},
                       {"lr_scheduler.factor", "0.5"},
                       {"lr_scheduler.stop_factor_lr", "0.25"}},
                      1);
  EXPECT_EQ(clamped->Rate(4), 0.5);
  EXPECT_EQ(clamped->Rate(int64_t{1} << 60), 0.25);
  EXPECT_EQ(clamped->Rate((int64_t{1} << 60) + 7), 0.25);
}

TEST(LrSchedule, PolyBeyondMaxUpdateFromTheStartKeepsTheOptimizersRate) {
  // MXNet's quirk: base_lr is only recomputed while num_update <= max_update.
  auto poly = Make({{"lr_scheduler", "poly"}, {"lr_scheduler.max_update", "3"}}, 0.7);
  EXPECT_EQ(poly->Rate(50), 0.7);
}

TEST(LrSchedule, NoneMeansNoSchedule) {
  EXPECT_EQ(Make({}, 1), nullptr);
  EXPECT_EQ(Make({{"lr_scheduler", "none"}}, 1), nullptr);
}

TEST(LrSchedule, StateSurvivesSaveAndLoad) {
  const OptimizerParams p = {{"lr_scheduler", "multifactor"},
                             {"lr_scheduler.step", "2,4"},
                             {"lr_scheduler.factor", "0.5"}};
  auto a = Make(p, 1);
  a->Rate(3);
  base::ByteWriter out;
  a->SaveState(out);
  auto b = Make(p, 1);
  base::ByteReader in(out.bytes(), "test");
  b->LoadState(in);
  for (int64_t n = 3; n < 8; ++n) EXPECT_EQ(a->Rate(n), b->Rate(n)) << n;

  auto other = Make({{"lr_scheduler", "factor"}, {"lr_scheduler.step", "2"}}, 1);
  base::ByteReader again(out.bytes(), "test");
  EXPECT_THROW(other->LoadState(again), InvalidArgument);
  EXPECT_EQ(other->Rate(1), 1.0);  // unchanged
}

struct BadCase {
  std::string label;
  OptimizerParams params;
  std::string named;  // must appear in the error
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.label; }

class LrScheduleRejects : public ::testing::TestWithParam<BadCase> {};

TEST_P(LrScheduleRejects, NamingTheParameter) {
  const BadCase& c = GetParam();
  try {
    Make(c.params, 0.1);
    FAIL() << "accepted " << c.label;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(c.named), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, LrScheduleRejects,
    ::testing::Values(
        BadCase{"unknown_kind", {{"lr_scheduler", "exponential"}}, "lr_scheduler"},
        BadCase{"step_zero",
                {{"lr_scheduler", "factor"}, {"lr_scheduler.step", "0"}},
                "lr_scheduler.step"},
        BadCase{"factor_above_one",
                {{"lr_scheduler", "factor"},
                 {"lr_scheduler.step", "1"},
                 {"lr_scheduler.factor", "1.5"}},
                "lr_scheduler.factor"},
        BadCase{"steps_not_increasing",
                {{"lr_scheduler", "multifactor"}, {"lr_scheduler.step", "4,4"}},
                "lr_scheduler.step"},
        BadCase{"steps_missing", {{"lr_scheduler", "multifactor"}}, "lr_scheduler.step"},
        BadCase{"steps_garbage",
                {{"lr_scheduler", "multifactor"}, {"lr_scheduler.step", "1,x"}},
                "lr_scheduler.step"},
        BadCase{"warmup_begin_above_base",
                {{"lr_scheduler", "cosine"},
                 {"lr_scheduler.max_update", "5"},
                 {"lr_scheduler.warmup_begin_lr", "1"}},
                "warmup_begin_lr"},
        BadCase{"warmup_negative",
                {{"lr_scheduler", "cosine"},
                 {"lr_scheduler.max_update", "5"},
                 {"lr_scheduler.warmup_steps", "-1"}},
                "warmup_steps"},
        BadCase{"warmup_mode",
                {{"lr_scheduler", "poly"},
                 {"lr_scheduler.max_update", "5"},
                 {"lr_scheduler.warmup_mode", "cubic"}},
                "warmup_mode"},
        BadCase{"max_update_zero",
                {{"lr_scheduler", "poly"}, {"lr_scheduler.max_update", "0"}},
                "max_update"},
        BadCase{"max_update_within_warmup",
                {{"lr_scheduler", "cosine"},
                 {"lr_scheduler.max_update", "3"},
                 {"lr_scheduler.warmup_steps", "3"}},
                "max_update"},
        BadCase{
            "unknown_schedule_parameter",
            {{"lr_scheduler", "factor"}, {"lr_scheduler.step", "1"}, {"lr_scheduler.gamma", "1"}},
            "lr_scheduler.gamma"}),
    [](const ::testing::TestParamInfo<BadCase>& param_info) { return param_info.param.label; });

}  // namespace
}  // namespace tandem::kv
