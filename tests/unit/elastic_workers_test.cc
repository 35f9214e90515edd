// Tests of elastic worker counts (src/launch/elastic_workers.h): --workers
// parsed or refused with the words that say why, the decision about a lost
// worker and the launcher's lines about it.
#include "launch/elastic_workers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tandem/error.h"

namespace tandem::launch {
namespace {

using ::testing::HasSubstr;

// One --workers value: the range it gives, or a part of the error.
struct RangeCase {
  const char* name;
  std::string text;
  int min;
  int max;
  std::string error;  // "" when it parses
};

class ParseWorkerRangeTest : public ::testing::TestWithParam<RangeCase> {};

TEST_P(ParseWorkerRangeTest, ParsesOrSaysWhatIsWrong) {
  const RangeCase& c = GetParam();
  if (!c.error.empty()) {
    try {
      const WorkerRange range = ParseWorkerRange(c.text);
      ADD_FAILURE() << "accepted '" << c.text << "' as " << range.min << ":" << range.max;
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr(c.error));
    }
    return;
  }
  const WorkerRange range = ParseWorkerRange(c.text);
  EXPECT_EQ(range.min, c.min);
  EXPECT_EQ(range.max, c.max);
  EXPECT_EQ(range.elastic(), c.min < c.max);
}

const std::string kNotNumbers =
    "is not a number of workers: give --workers N, or --workers MIN:MAX";

INSTANTIATE_TEST_SUITE_P(
    Values, ParseWorkerRangeTest,
    ::testing::Values(
        RangeCase{"Range", "3:4", 3, 4, ""}, RangeCase{"OneCount", "4", 4, 4, ""},
        RangeCase{"EqualEnds", "4:4", 4, 4, ""}, RangeCase{"DownToOne", "1:8", 1, 8, ""},
        RangeCase{"Largest", "1:65536", 1, 65536, ""},
        RangeCase{"Letters", "a:4", 0, 0, "--workers 'a:4' " + kNotNumbers},
        RangeCase{"Word", "four", 0, 0, "--workers 'four' " + kNotNumbers},
        RangeCase{"Empty", "", 0, 0, kNotNumbers},
        RangeCase{"NoMax", "3:", 0, 0, "--workers '3:' " + kNotNumbers},
        RangeCase{"NoMin", ":4", 0, 0, "--workers ':4' " + kNotNumbers},
        RangeCase{"ThreeParts", "2:3:4", 0, 0, "--workers '2:3:4' " + kNotNumbers},
        RangeCase{"Spaces", "3: 4", 0, 0, kNotNumbers},
        RangeCase{"Plus", "+3:4", 0, 0, kNotNumbers},
        RangeCase{"Fraction", "2.5:4", 0, 0, kNotNumbers},
        RangeCase{"ZeroMin", "0:4", 0, 0, "--workers 0:4: MIN must be at least 1"},
        RangeCase{"NegativeMin", "-1:4", 0, 0, "--workers -1:4: MIN must be at least 1"},
        RangeCase{"ZeroCount", "0", 0, 0, "--workers 0: a job needs at least 1 worker"},
        RangeCase{"MinAboveMax", "5:4", 0, 0, "--workers 5:4: MIN (5) is above MAX (4)"},
        RangeCase{"TooMany", "1:65537", 0, 0, "--workers 1:65537: at most 65536 workers"}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(WorkerRangeTest, FlagIsWrittenAsTheUserWritesIt) {
  EXPECT_EQ((WorkerRange{3, 4}.Flag()), "--workers 3:4");
  EXPECT_EQ((WorkerRange{4, 4}.Flag()), "--workers 4");
}

TEST(WorkerRangeTest, ElasticOnlyWithAMinimumBelowTheCount) {
  EXPECT_TRUE(IsElastic(3, 4));
  EXPECT_TRUE(IsElastic(1, 2));
  EXPECT_FALSE(IsElastic(4, 4));
  EXPECT_FALSE(IsElastic(0, 4));  // not given
  EXPECT_FALSE(IsElastic(1, 1));
}

// A worker lost after `left_before` others left a job of `range`.
struct LossCase {
  const char* name;
  WorkerRange range;
  int left_before;
  bool tolerated;
  int remaining;
  std::string report;     // the whole line
  std::string shortfall;  // "" when tolerated
};

class DecideWorkerLossTest : public ::testing::TestWithParam<LossCase> {};

TEST_P(DecideWorkerLossTest, ToleratesWhileTheMinimumRemains) {
  const LossCase& c = GetParam();
  const WorkerLoss loss =
      DecideWorkerLoss(c.range, c.left_before, "worker 3 (pid 12) killed by signal 9 (SIGKILL)");
  EXPECT_EQ(loss.tolerated, c.tolerated);
  EXPECT_EQ(loss.remaining, c.remaining);
  EXPECT_EQ(loss.report, c.report);
  EXPECT_EQ(loss.shortfall, c.shortfall);
}

INSTANTIATE_TEST_SUITE_P(
    Losses, DecideWorkerLossTest,
    ::testing::Values(
        LossCase{"FirstOfFourWithMinThree", WorkerRange{3, 4}, 0, true, 3,
                 "worker 3 (pid 12) killed by signal 9 (SIGKILL); the job goes on with 3 of 4 "
                 "workers (--workers 3:4)",
                 ""},
        LossCase{"SecondOfFourWithMinThree", WorkerRange{3, 4}, 1, false, 2,
                 "worker 3 (pid 12) killed by signal 9 (SIGKILL), which leaves 2 of 4 workers, "
                 "below the minimum of 3 (--workers 3:4)",
                 "2 of 4 workers remained, below the minimum of 3 (--workers 3:4)"},
        LossCase{"DownToTheLastWorker", WorkerRange{1, 3}, 1, true, 1,
                 "worker 3 (pid 12) killed by signal 9 (SIGKILL); the job goes on with 1 of 3 "
                 "workers (--workers 1:3)",
                 ""},
        LossCase{"TheLastWorker", WorkerRange{1, 3}, 2, false, 0,
                 "worker 3 (pid 12) killed by signal 9 (SIGKILL), which leaves 0 of 3 workers, "
                 "below the minimum of 1 (--workers 1:3)",
                 "0 of 3 workers remained, below the minimum of 1 (--workers 1:3)"},
        LossCase{"ThirdOfEightWithMinFive", WorkerRange{5, 8}, 2, true, 5,
                 "worker 3 (pid 12) killed by signal 9 (SIGKILL); the job goes on with 5 of 8 "
                 "workers (--workers 5:8)",
                 ""},
        LossCase{"FourthOfEightWithMinFive", WorkerRange{5, 8}, 3, false, 4,
                 "worker 3 (pid 12) killed by signal 9 (SIGKILL), which leaves 4 of 8 workers, "
                 "below the minimum of 5 (--workers 5:8)",
                 "4 of 8 workers remained, below the minimum of 5 (--workers 5:8)"}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

// A replacement that will come (--max-restarts, --elastic-timeout) makes a
// loss below the minimum a wait, unless no worker would remain.
TEST(DecideWorkerLossWaits, BelowTheMinimumWithAReplacementComing) {
  const std::string killed = "worker 3 (pid 12) killed by signal 9 (SIGKILL)";
  const WorkerLoss waits =
      DecideWorkerLoss(WorkerRange{3, 4}, 1, killed, std::chrono::seconds(600));
  EXPECT_TRUE(waits.tolerated);
  EXPECT_TRUE(waits.below_minimum);
  EXPECT_EQ(waits.remaining, 2);
  EXPECT_EQ(waits.report, killed +
                              ", which leaves 2 of 4 workers, below the minimum of 3 (--workers "
                              "3:4): the job waits up to 600 s for its replacement to join "
                              "(--elastic-timeout)");
  EXPECT_EQ(waits.shortfall, "");
  const WorkerLoss above = DecideWorkerLoss(WorkerRange{3, 4}, 0, killed, std::chrono::seconds(1));
  EXPECT_TRUE(above.tolerated);
  EXPECT_FALSE(above.below_minimum);
  const WorkerLoss last = DecideWorkerLoss(WorkerRange{1, 3}, 2, killed, std::chrono::seconds(600));
  EXPECT_FALSE(last.tolerated);
  EXPECT_EQ(last.shortfall, "0 of 3 workers remained, below the minimum of 1 (--workers 1:3)");
}

TEST(ElasticLinesTest, TheSuccessLineCountsAndNamesTheWorkersThatLeft) {
  EXPECT_EQ(
      ElasticSuccessLine(WorkerRange{3, 4}, {"worker 3 (pid 12) killed by signal 9 (SIGKILL)"}),
      "job succeeded with 3 of 4 workers (--workers 3:4); left the job: worker 3 (pid 12) "
      "killed by signal 9 (SIGKILL)");
  EXPECT_EQ(ElasticSuccessLine(WorkerRange{2, 4}, {"worker 1 (pid 10) exited with status 1",
                                                   "worker 3 (pid 12) exited with status 9"}),
            "job succeeded with 2 of 4 workers (--workers 2:4); left the job: worker 1 (pid 10) "
            "exited with status 1, worker 3 (pid 12) exited with status 9");
  EXPECT_EQ(ElasticSuccessLine(WorkerRange{2, 4},
                               {"worker 1 (pid 10) exited with status 137",
                                "worker 1 (pid 20) killed by signal 9 (SIGKILL)"},
                               1),
            "job succeeded with 3 of 4 workers (--workers 2:4) after 1 replacement; left the "
            "job: worker 1 (pid 10) exited with status 137, worker 1 (pid 20) killed by signal 9 "
            "(SIGKILL)");
  EXPECT_EQ(ElasticSuccessLine(WorkerRange{3, 4}, {"a", "b"}, 2),
            "job succeeded with 4 of 4 workers (--workers 3:4) after 2 replacements; left the "
            "job: a, b");
}

TEST(ElasticLinesTest, TheFirstLineSaysTheMinimumOfAnElasticJob) {
  EXPECT_EQ(DescribeWorkerCount(4, 3), "4 workers (going on with 3 or more: --workers 3:4)");
  EXPECT_EQ(DescribeWorkerCount(4, 3, 2),
            "4 workers (going on with 3 or more: --workers 3:4; a worker that leaves is "
            "replaced, 2 times at most)");
  EXPECT_EQ(DescribeWorkerCount(3, 2, 1),
            "3 workers (going on with 2 or more: --workers 2:3; a worker that leaves is "
            "replaced, once at most)");
  EXPECT_EQ(DescribeWorkerCount(4, 4, 2), "4 workers");  // not elastic: nothing is replaced
  EXPECT_EQ(DescribeWorkerCount(4, 4), "4 workers");
  EXPECT_EQ(DescribeWorkerCount(4, 0), "4 workers");
  EXPECT_EQ(DescribeWorkerCount(1, 0), "1 worker");
}

}  // namespace
}  // namespace tandem::launch
