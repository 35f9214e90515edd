// The framework engine's tuner (src/collective/engine_autotuner.h) against
// a synthetic job whose throughput is a known function of the settings:
// after the warm-up it measures every candidate of each knob twice (A B C
// C B A), keeps each knob's best, keeps the value in use when nothing beats
// it by the minimum gain or when the throughput only drifts with time,
// stops at the sample limit, and writes its log and the chosen settings as
// environment variables.
#include "collective/engine_autotuner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "base/temporary_directory.h"
#include "tandem/error.h"

namespace tandem::collective {
namespace {

using std::chrono::microseconds;
constexpr size_t kMiB = size_t{1} << 20;

// MB/s of the synthetic job: best at `threshold`, `cycle` and `algorithm`,
// each step away from them at least 9% slower, the knobs independent; with
// `drift`, every step of the job is that many MB/s faster than the last.
struct Job {
  size_t threshold;
  microseconds cycle;
  AllReduceAlgorithm algorithm;
  double drift = 0;
  bool flat = false;  // the settings cost nothing: only the drift moves the rate

  double Rate(const EngineSettings& s, int step) const {
    if (flat) return 1000.0 + drift * step;
    const double t = std::abs(std::log2(static_cast<double>(s.fusion_threshold + 1) /
                                        static_cast<double>(threshold + 1)));
    const double c = std::abs(static_cast<double>(s.cycle_time.count() - cycle.count())) / 500.0;
    const double a = s.algorithm == algorithm ? 1.0 : 0.9;
    return 1000.0 / (1 + 0.1 * t) / (1 + 0.1 * c) * a + drift * step;
  }
};

// Runs `steps` steps of two tensors (1 MB each) through `tuner`, each
// taking the time that makes its rate the job's; returns the samples at
// which the settings changed.
int Drive(EngineAutotuner& tuner, const Job& job, int steps) {
  auto now = EngineAutotuner::Clock::time_point{};
  int changes = 0;
  for (int s = 0; s < steps && !tuner.done(); ++s) {
    const double seconds = 2.0 / job.Rate(tuner.settings(), s);  // 2 MB at Rate MB/s
    now += std::chrono::duration_cast<EngineAutotuner::Clock::duration>(
        std::chrono::duration<double>(seconds));
    changes += tuner.Observe({"fc.weight", "fc.bias"}, 2000000, now) ? 1 : 0;
  }
  return changes;
}

std::vector<std::string> Lines(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

struct Case {
  const char* name;
  Job job;
  bool hierarchical;  // offered as a candidate
};

class EngineAutotunerSearch : public ::testing::TestWithParam<Case> {};

TEST_P(EngineAutotunerSearch, KeepsEachKnobsBestAndWritesTheLogAndTheResult) {
  const Case& c = GetParam();
  base::TemporaryDirectory dir;
  AutotuneConfig config;
  config.warmup_samples = 2;
  config.steps_per_sample = 3;
  config.log_path = (dir.path() / "autotune.csv").string();
  config.result_path = (dir.path() / "tuned.env").string();
  std::vector<AllReduceAlgorithm> algorithms = {AllReduceAlgorithm::kRing,
                                                AllReduceAlgorithm::kHalvingDoubling};
  if (c.hierarchical) algorithms.push_back(AllReduceAlgorithm::kHierarchical);
  base::Logger log("autotune-test", 0, 2, true);
  const EngineSettings start{128 * kMiB, microseconds(1000), AllReduceAlgorithm::kAuto};
  EngineAutotuner tuner(start, config, algorithms, log);
  EXPECT_EQ(tuner.settings(), start);
  Drive(tuner, c.job, 1000);
  ASSERT_TRUE(tuner.done());
  // Thresholds 128 MiB (the start), 0, 1, 4, 16, 64 MiB; cycle times 1 ms
  // (the start), 0.5, 2.5, 5, 10 ms; algorithms auto, ring,
  // halving-doubling (+ hierarchical); each twice.
  const int expected = 2 * (6 + 5 + (c.hierarchical ? 4 : 3));
  EXPECT_EQ(tuner.samples(), expected);
  const EngineSettings want{c.job.threshold, c.job.cycle, c.job.algorithm};
  EXPECT_EQ(tuner.settings(), want) << tuner.settings().Describe();

  const auto rows = Lines(config.log_path);
  ASSERT_EQ(rows.size(), 1u + 2u + static_cast<size_t>(expected) + 1u);
  EXPECT_EQ(rows[0],
            "sample,phase,fusion_threshold_bytes,cycle_time_ms,algorithm,seconds,score_mb_per_s");
  EXPECT_EQ(rows[1].rfind("1,warmup,134217728,1,auto,", 0), 0u) << rows[1];
  EXPECT_EQ(rows[3].rfind("3,fusion_threshold,134217728,1,auto,", 0), 0u) << rows[3];
  EXPECT_EQ(rows[4].rfind("4,fusion_threshold,0,1,auto,", 0), 0u) << rows[4];
  // The mirrored order: 64 MiB twice in the middle, 128 MiB last.
  EXPECT_EQ(rows[8].rfind("8,fusion_threshold,67108864,1,auto,", 0), 0u) << rows[8];
  EXPECT_EQ(rows[9].rfind("9,fusion_threshold,67108864,1,auto,", 0), 0u) << rows[9];
  EXPECT_EQ(rows[14].rfind("14,fusion_threshold,134217728,1,auto,", 0), 0u) << rows[14];
  EXPECT_NE(rows.back().find(",chosen,"), std::string::npos) << rows.back();

  std::ostringstream env;
  env << "TANDEM_FUSION_THRESHOLD=" << want.fusion_threshold << "\n"
      << "TANDEM_CYCLE_TIME=" << static_cast<double>(want.cycle_time.count()) / 1000.0 << "\n";
  if (want.algorithm != AllReduceAlgorithm::kAuto)
    env << "TANDEM_ALLREDUCE_ALGORITHM=" << AllReduceAlgorithmName(want.algorithm) << "\n";
  std::ifstream result(config.result_path);
  std::stringstream got;
  got << result.rdbuf();
  EXPECT_EQ(got.str(), env.str());
}

INSTANTIATE_TEST_SUITE_P(
    Jobs, EngineAutotunerSearch,
    ::testing::Values(
        Case{"mid_threshold_slow_cycle_halving",
             {16 * kMiB, microseconds(2500), AllReduceAlgorithm::kHalvingDoubling},
             false},
        Case{"no_fusion_fast_cycle_auto", {0, microseconds(500), AllReduceAlgorithm::kAuto}, false},
        Case{"start_values_hierarchical",
             {128 * kMiB, microseconds(1000), AllReduceAlgorithm::kHierarchical},
             true},
        Case{"small_threshold_long_cycle_ring",
             {1 * kMiB, microseconds(10000), AllReduceAlgorithm::kRing},
             true}),
    [](const ::testing::TestParamInfo<Case>& p) { return std::string(p.param.name); });

TEST(EngineAutotuner, StopsAtTheSampleLimitWithTheBestMeasuredSoFar) {
  AutotuneConfig config;
  config.warmup_samples = 0;
  config.steps_per_sample = 1;
  config.max_samples = 3;  // thresholds 128 MiB, 0, 1 MiB only, once each
  base::Logger log("autotune-test", 0, 2, true);
  EngineAutotuner tuner({128 * kMiB, microseconds(1000), AllReduceAlgorithm::kAuto}, config, {},
                        log);
  // Best would be 4 MiB, which is never measured: 1 MiB is the closest seen.
  Drive(tuner, {4 * kMiB, microseconds(1000), AllReduceAlgorithm::kAuto}, 100);
  ASSERT_TRUE(tuner.done());
  EXPECT_EQ(tuner.samples(), 3);
  EXPECT_EQ(tuner.settings().fusion_threshold, 1 * kMiB);
  EXPECT_EQ(tuner.settings().cycle_time, microseconds(1000));
}

// Candidates that gain less than min_gain, and a throughput that only
// grows with time (which, measured in one pass, would crown whichever
// candidate comes last), leave the settings where they started.
TEST(EngineAutotuner, SmallGainsAndDriftKeepTheValueInUse) {
  AutotuneConfig config;
  config.warmup_samples = 0;
  config.steps_per_sample = 3;
  config.min_gain = 0.15;  // above the 10% of the algorithm knob
  base::Logger log("autotune-test", 0, 2, true);
  const EngineSettings start{128 * kMiB, microseconds(1000), AllReduceAlgorithm::kAuto};
  EngineAutotuner small(start, config, {AllReduceAlgorithm::kRing}, log);
  Drive(small, {128 * kMiB, microseconds(1000), AllReduceAlgorithm::kRing}, 1000);
  ASSERT_TRUE(small.done());
  EXPECT_EQ(small.settings(), start) << small.settings().Describe();

  config.min_gain = 0.03;
  EngineAutotuner drifting(start, config, {AllReduceAlgorithm::kRing}, log);
  // Every setting equal, each step 10 MB/s faster: the last of 6 threshold
  // candidates would be 15% ahead of the first in a single pass.
  Drive(drifting, {0, microseconds(0), AllReduceAlgorithm::kAuto, 10.0, true}, 1000);
  ASSERT_TRUE(drifting.done());
  EXPECT_EQ(drifting.settings().fusion_threshold, start.fusion_threshold)
      << drifting.settings().Describe();
  EXPECT_EQ(drifting.settings().cycle_time, start.cycle_time) << drifting.settings().Describe();
}

TEST(EngineAutotuner, ASampleEndsWhenOneNameCompletedStepsPerSampleTimes) {
  AutotuneConfig config;
  config.warmup_samples = 1;
  config.steps_per_sample = 4;
  base::Logger log("autotune-test", 0, 2, true);
  EngineAutotuner tuner({128 * kMiB, microseconds(1000), AllReduceAlgorithm::kAuto}, config, {},
                        log);
  auto t = EngineAutotuner::Clock::time_point{};
  auto step = [&] {
    t += std::chrono::milliseconds(1);
    return tuner.Observe({"a"}, 100, t);
  };
  // Cycles that completed nothing count nothing.
  EXPECT_FALSE(tuner.Observe({}, 0, t));
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(step()) << i;  // warm-up sample
  EXPECT_EQ(tuner.samples(), 0);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(step()) << i;
  EXPECT_TRUE(step());  // the start's sample scored; the next threshold (0) is tried
  EXPECT_EQ(tuner.samples(), 1);
  EXPECT_EQ(tuner.settings().fusion_threshold, 0u);
}

TEST(EngineAutotuner, RefusesAnUnwritableLogAndBadSampling) {
  base::Logger log("autotune-test", 0, 2, true);
  AutotuneConfig config;
  config.log_path = "/nonexistent-dir/autotune.csv";
  EXPECT_THROW(EngineAutotuner({}, config, {}, log), ConfigError);
  AutotuneConfig zero;
  zero.steps_per_sample = 0;
  EXPECT_THROW(EngineAutotuner({}, zero, {}, log), ConfigError);
}

}  // namespace
}  // namespace tandem::collective
