// The framework engine (include/tandem/fusion_engine.h) over groups of
// worker threads on the in-process transport: requests submitted in a
// different order on every rank come out exact, fused or not; repeated
// steps are agreed from the response cache; every kind of disagreement
// fails on every rank that submitted the tensor with a message naming it
// and what each rank sent, and the next request succeeds; a stall is
// reported with the missing ranks; a lost peer fails pending and later
// requests with PeerLost. Stall times run on a manual clock the test
// advances (support/manual_time.h).
#include "tandem/fusion_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <thread>

#include "base/clock.h"
#include "base/temporary_directory.h"
#include "collective/fusion_engine.h"
#include "collective/negotiation_message.h"
#include "collective_job.h"
#include "support/manual_time.h"

namespace tandem::collective {
namespace {

using tandem::testing::AdvanceUntil;
using tandem::testing::WaitFor;
using testing::Buffer;
using testing::CollectiveJob;
using testing::What;

FusionEngine::Options TestOptions(size_t threshold) {
  FusionEngine::Options o;
  o.fusion_threshold = threshold;
  o.cycle_time = std::chrono::milliseconds(3);
  o.stall_check = std::chrono::seconds(30);
  o.stall_shutdown = std::chrono::seconds(30);
  return o;
}

// An engine over every worker; on `clock` when given, else on the real one.
std::unique_ptr<FusionEngine> MakeEngine(CollectiveService& s, int n, FusionEngine::Options o,
                                         const base::Clock* clock = nullptr) {
  std::vector<int> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  if (clock != nullptr) return FusionEngineImpl::MakeEngine(s.NewGroup(all), o, *clock);
  return std::make_unique<FusionEngine>(s.NewGroup(all), o);
}

// Moves `clock` on by `step`, then waits until `engine` decided a cycle on
// the new time. Cycle k's decision uses rank 0's time sampled when its
// cycle k began; counted here after the step as c, this rank's own next
// message (cycle c+2) leaves after the step, so rank 0 samples cycle c+3
// after it, and that cycle is decided once this rank counts c+4.
void StepAndObserve(base::ManualClock& clock, std::chrono::milliseconds step,
                    const FusionEngine& engine) {
  clock.Advance(step);
  const uint64_t c = engine.stats().cycles;
  EXPECT_TRUE(WaitFor([&] { return engine.stats().cycles >= c + 4; }));
}

// The tensors of one step: name, dtype, count, reduction, prescale.
struct Spec {
  std::string name;
  DType dtype;
  int64_t count;
  Reduction op;
  double prescale;
};

const std::vector<Spec>& Specs() {
  static const std::vector<Spec> specs = {
      {"conv1.weight", DType::kF32, 1031, Reduction::kSum, 1.0},
      {"conv1.bias", DType::kF32, 1, Reduction::kSum, 1.0},
      {"conv2.weight", DType::kF32, 70001, Reduction::kSum, 1.0},
      {"conv2.bias", DType::kF32, 0, Reduction::kSum, 1.0},
      {"fc.weight", DType::kF64, 4099, Reduction::kSum, 0.5},
      {"fc.bias", DType::kF64, 17, Reduction::kSum, 0.5},
      {"embed.rows", DType::kI64, 333, Reduction::kSum, 1.0},
      {"embed.count", DType::kI32, 5, Reduction::kMax, 1.0},
      {"norm.scale", DType::kBF16, 129, Reduction::kSum, 1.0},
      {"norm.shift", DType::kF16, 257, Reduction::kSum, 1.0},
      {"step.loss", DType::kF32, 3, Reduction::kMax, 1.0},
      {"head.weight", DType::kF32, 2047, Reduction::kSum, 1.0},
  };
  return specs;
}

// Rank r's element e of tensor t (and step s): small integers, exact in
// every dtype and in every sum of up to 8 ranks.
double Input(int r, size_t t, int64_t e, int s) {
  return static_cast<double>(r + 1 + (e % 5) + static_cast<int64_t>(t % 3) + s);
}

double Expected(const Spec& spec, int n, size_t t, int64_t e, int s) {
  if (spec.op == Reduction::kMax) return Input(n - 1, t, e, s);
  double sum = 0;
  for (int r = 0; r < n; ++r) sum += Input(r, t, e, s) * spec.prescale;
  return sum;
}

class FusionEngineSteps : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(FusionEngineSteps, AnyOrderOnEveryRankGivesExactResultsAndRepeatsFromTheCache) {
  const int n = std::get<0>(GetParam());
  const bool fuse = std::get<1>(GetParam());
  constexpr int kSteps = 3;
  CollectiveJob job(n);
  job.RunOk([&](int rank, CollectiveService& s) {
    auto engine = MakeEngine(s, n, TestOptions(fuse ? size_t{1} << 20 : 0));
    ASSERT_EQ(engine->rank(), rank);
    ASSERT_EQ(engine->size(), n);
    const auto& specs = Specs();
    std::mt19937 shuffle(static_cast<unsigned>(rank * 7919 + 1));
    for (int step = 0; step < kSteps; ++step) {
      std::vector<size_t> order(specs.size());
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), shuffle);  // another order on every rank
      std::vector<Buffer> in, out;
      for (const Spec& spec : specs) {
        in.emplace_back(spec.dtype, spec.count);
        out.emplace_back(spec.dtype, spec.count);
      }
      Buffer broadcast(DType::kI64, 1001);
      for (int64_t e = 0; e < broadcast.count; ++e)
        broadcast.Set(e, rank == n - 1 ? e * 3 + step : -1);
      std::vector<CollectiveHandle> handles(specs.size());
      CollectiveHandle broadcast_handle;
      for (size_t k = 0; k < order.size(); ++k) {
        const size_t t = order[k];
        for (int64_t e = 0; e < specs[t].count; ++e) in[t].Set(e, Input(rank, t, e, step));
        ReduceOptions o;
        o.op = specs[t].op;
        o.prescale = specs[t].prescale;
        // Half of them in place.
        TensorView dst = t % 2 == 0 ? in[t].view() : out[t].view();
        handles[t] = engine->AllReduce(specs[t].name, in[t].view(), dst, o);
        if (k == order.size() / 2) {
          broadcast_handle = engine->Broadcast("embed.table", broadcast.view(), n - 1);
        }
      }
      for (size_t t = 0; t < specs.size(); ++t) {
        handles[t].Wait();
        const Buffer& result = t % 2 == 0 ? in[t] : out[t];
        for (int64_t e = 0; e < specs[t].count; ++e) {
          ASSERT_EQ(result.Get(e), Expected(specs[t], n, t, e, step))
              << specs[t].name << " element " << e << " step " << step << " rank " << rank;
        }
      }
      broadcast_handle.Wait();
      for (int64_t e = 0; e < broadcast.count; ++e) ASSERT_EQ(broadcast.Get(e), e * 3 + step);
    }
    const FusionEngine::Stats st = engine->stats();
    const uint64_t requests = (specs.size() + 1) * kSteps;
    EXPECT_EQ(st.negotiated + st.cached, requests);
    // Step 1 is negotiated in full; later steps ride on the cache, unless
    // a request straddled a cycle boundary on some rank (then the first
    // rank to hold it may have sent it in full once more).
    EXPECT_GE(st.negotiated, specs.size() + 1);
    EXPECT_GE(st.cached, requests / 2) << "negotiated " << st.negotiated;
    EXPECT_EQ(st.mismatches, 0u);
    EXPECT_EQ(st.stalls_failed, 0u);
    if (fuse) {
      EXPECT_GT(st.fused_tensors, 0u);
      EXPECT_LT(st.collectives, requests);
    } else {
      EXPECT_EQ(st.fused_tensors, 0u);
      EXPECT_EQ(st.collectives, requests);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(GroupsFusedAndNot, FusionEngineSteps,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5, 8), ::testing::Bool()),
                         [](const auto& info) {
                           return fmt::format("n{}_{}", std::get<0>(info.param),
                                              std::get<1>(info.param) ? "fused" : "unfused");
                         });

// One step of Specs() on `engine`: every tensor submitted in a shuffled
// order, waited for and checked exact.
void RunStep(FusionEngine& engine, int n, int rank, int step, std::mt19937& shuffle) {
  const auto& specs = Specs();
  std::vector<size_t> order(specs.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), shuffle);
  std::vector<Buffer> in;
  for (const Spec& spec : specs) in.emplace_back(spec.dtype, spec.count);
  std::vector<CollectiveHandle> handles(specs.size());
  for (size_t t : order) {
    for (int64_t e = 0; e < specs[t].count; ++e) in[t].Set(e, Input(rank, t, e, step));
    ReduceOptions o;
    o.op = specs[t].op;
    o.prescale = specs[t].prescale;
    handles[t] = engine.AllReduce(specs[t].name, in[t].view(), in[t].view(), o);
  }
  for (size_t t = 0; t < specs.size(); ++t) {
    handles[t].Wait();
    for (int64_t e = 0; e < specs[t].count; ++e) {
      ASSERT_EQ(in[t].Get(e), Expected(specs[t], n, t, e, step))
          << specs[t].name << " element " << e << " step " << step << " rank " << rank;
    }
  }
}

// Ranks started with different fusion thresholds, cycle times and cache
// capacities: rank 0's are in force everywhere, so every rank fuses alike
// and the results are exact (with each rank's own threshold, ranks would
// run differently sized fusion buffers and fail with CallMismatch).
class FusionEngineSettings : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(FusionEngineSettings, RankZerosSettingsAreInForceOnEveryRank) {
  const int n = std::get<0>(GetParam());
  const bool rank0_fuses = std::get<1>(GetParam());
  CollectiveJob job(n);
  job.RunOk([&](int rank, CollectiveService& s) {
    const bool fuses = (rank == 0) == rank0_fuses;
    FusionEngine::Options o = TestOptions(fuses ? size_t{1} << 20 : 0);
    o.cycle_time = std::chrono::microseconds(rank == 0 ? 2000 : 500 * rank);
    o.cache_capacity = rank == 0 ? 4 : 1024;
    auto engine = MakeEngine(s, n, o);
    std::mt19937 shuffle(static_cast<unsigned>(rank * 31 + 7));
    for (int step = 0; step < 3; ++step) RunStep(*engine, n, rank, step, shuffle);
    const FusionEngine::Stats st = engine->stats();
    EXPECT_EQ(st.fusion_threshold, rank0_fuses ? size_t{1} << 20 : 0) << "rank " << rank;
    EXPECT_EQ(st.cycle_time, std::chrono::microseconds(2000)) << "rank " << rank;
    EXPECT_EQ(st.mismatches, 0u);
    if (rank0_fuses) {
      EXPECT_GT(st.fused_tensors, 0u) << "rank " << rank;
    } else {
      EXPECT_EQ(st.fused_tensors, 0u) << "rank " << rank;
    }
    // Rank 0's capacity of 4 bounds every rank's cache: at most 4 of the 12
    // names per step ride on it.
    EXPECT_GE(st.negotiated, 3u * (Specs().size() - 4)) << "rank " << rank;
  });
}

INSTANTIATE_TEST_SUITE_P(Groups, FusionEngineSettings,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Bool()),
                         [](const auto& p) {
                           return fmt::format("n{}_{}", std::get<0>(p.param),
                                              std::get<1>(p.param) ? "rank0_fuses" : "rank0_not");
                         });

// Autotune on a real group: rank 0 walks every candidate (twice) while the job
// trains, every result stays exact through each switch, every rank ends
// with rank 0's choice in force, and rank 0 writes its log and result.
TEST(FusionEngineAutotune, EveryCandidateRunsExactAndEveryRankAdoptsTheChoice) {
  constexpr int n = 3;
  base::TemporaryDirectory dir;
  const std::string log_path = (dir.path() / "autotune.csv").string();
  const std::string result_path = (dir.path() / "tuned.env").string();
  // 1 warm-up + 2 x (6 thresholds + 6 cycle times (3 ms is off the grid) +
  // 3 algorithms) = 31 samples of 2 steps; a sample ends at most 2 steps
  // after the one before, the first in step 1.
  constexpr int kSteps = 2 * 31;
  std::vector<FusionEngine::Stats> stats(n);
  CollectiveJob job(n);
  job.RunOk([&](int rank, CollectiveService& s) {
    FusionEngine::Options o = TestOptions(size_t{128} << 20);
    o.autotune = true;
    o.autotune_warmup_samples = 1;
    o.autotune_steps_per_sample = 2;
    o.autotune_log = log_path;
    o.autotune_result = result_path;
    auto engine = MakeEngine(s, n, o);
    std::mt19937 shuffle(static_cast<unsigned>(rank * 131 + 3));
    for (int step = 0; step < kSteps; ++step) RunStep(*engine, n, rank, step, shuffle);
    // One more step, so that every rank ran a cycle under the final choice.
    RunStep(*engine, n, rank, kSteps, shuffle);
    stats[static_cast<size_t>(rank)] = engine->stats();
  });
  EXPECT_TRUE(stats[0].autotune_done);
  EXPECT_EQ(stats[0].autotune_samples, 30u);
  for (int r = 1; r < n; ++r) {
    const auto& st = stats[static_cast<size_t>(r)];
    EXPECT_FALSE(st.autotune_done) << "only rank 0 tunes";
    EXPECT_EQ(st.fusion_threshold, stats[0].fusion_threshold) << "rank " << r;
    EXPECT_EQ(st.cycle_time, stats[0].cycle_time) << "rank " << r;
    EXPECT_EQ(st.algorithm, stats[0].algorithm) << "rank " << r;
  }
  std::ifstream csv(log_path);
  int rows = 0;
  for (std::string line; std::getline(csv, line);) ++rows;
  EXPECT_EQ(rows, 1 + 1 + 30 + 1);  // header, warm-up, scored, chosen
  std::ifstream result(result_path);
  std::string first;
  std::getline(result, first);
  EXPECT_EQ(first, fmt::format("TANDEM_FUSION_THRESHOLD={}", stats[0].fusion_threshold));
}

enum class Mismatch { kShape, kDType, kOp, kRoot, kScale, kMissing };

std::string MismatchName(Mismatch m) {
  switch (m) {
    case Mismatch::kShape:
      return "shape";
    case Mismatch::kDType:
      return "dtype";
    case Mismatch::kOp:
      return "op";
    case Mismatch::kRoot:
      return "root";
    case Mismatch::kScale:
      return "scale";
    case Mismatch::kMissing:
      return "missing";
  }
  return "?";
}

class FusionEngineMismatch : public ::testing::TestWithParam<std::tuple<int, Mismatch, bool>> {};

TEST_P(FusionEngineMismatch, EveryRankThatSubmittedFailsNamingTheTensorAndTheNextSucceeds) {
  const int n = std::get<0>(GetParam());
  const Mismatch kind = std::get<1>(GetParam());
  const bool cached = std::get<2>(GetParam());  // agreed once before the mismatch
  const int odd = n - 1;                        // the rank that sends something else
  base::ManualClock clock;
  CollectiveJob job(n);
  job.RunOk([&](int rank, CollectiveService& s) {
    FusionEngine::Options options = TestOptions(size_t{1} << 20);
    options.stall_check = std::chrono::milliseconds(60);
    options.stall_shutdown = std::chrono::milliseconds(250);
    auto engine = MakeEngine(s, n, options, &clock);
    const bool broadcast = kind == Mismatch::kRoot;
    auto submit = [&](Buffer& b, bool deviate) {
      if (broadcast) return engine->Broadcast("bad", b.view(), deviate ? 1 : 0);
      ReduceOptions o;
      if (deviate && kind == Mismatch::kOp) o.op = Reduction::kMax;
      if (deviate && kind == Mismatch::kScale) o.prescale = 2.0;
      return engine->AllReduce("bad", b.view(), b.view(), o);
    };
    if (cached) {
      Buffer b(DType::kF32, 10);
      for (int64_t e = 0; e < 10; ++e) b.Set(e, rank);
      submit(b, false).Wait();
      EXPECT_EQ(b.Get(3), broadcast ? 0.0 : n * (n - 1) / 2.0);
    }
    const bool deviate = rank == odd;
    Buffer bad(deviate && kind == Mismatch::kDType ? DType::kF64 : DType::kF32,
               deviate && kind == Mismatch::kShape ? 11 : 10);
    Buffer good(DType::kI32, 100);
    for (int64_t e = 0; e < 100; ++e) good.Set(e, rank + e);
    CollectiveHandle bad_handle;
    if (!(deviate && kind == Mismatch::kMissing)) bad_handle = submit(bad, deviate);
    CollectiveHandle good_handle = engine->AllReduce("good", good.view(), good.view());
    good_handle.Wait();
    for (int64_t e = 0; e < 100; ++e) ASSERT_EQ(good.Get(e), n * (n - 1) / 2 + n * e);

    if (kind == Mismatch::kMissing) {
      if (!deviate) {
        try {
          bad_handle.Wait();
          ADD_FAILURE() << "rank " << rank << ": 'bad' ran without rank " << odd;
        } catch (const Timeout& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find("'bad'"), std::string::npos) << what;
          EXPECT_NE(what.find(fmt::format("missing on rank(s) {}", odd)), std::string::npos)
              << what;
          EXPECT_NE(what.find("allreduce float32[10] sum"), std::string::npos) << what;
        }
      } else {
        // No request to fail here: the report is logged and counted on
        // every rank. This rank moves the clock, 100 ms at a time, each step
        // seen by a decision: the stall is reported once (at 0.1 s, past
        // the check time) and fails once (at 0.3 s, past the shutdown).
        for (int i = 0; i < 10 && engine->stats().stalls_failed == 0; ++i) {
          StepAndObserve(clock, std::chrono::milliseconds(100), *engine);
        }
      }
      const FusionEngine::Stats st = engine->stats();
      EXPECT_EQ(st.stalls_failed, 1u) << "rank " << rank;
      EXPECT_EQ(st.stalls_reported, 1u) << "rank " << rank;
      EXPECT_NE(st.last_report.find(fmt::format("missing on rank(s) {}", odd)), std::string::npos)
          << st.last_report;
    } else {
      try {
        bad_handle.Wait();
        ADD_FAILURE() << "rank " << rank << ": 'bad' succeeded despite the " << MismatchName(kind)
                      << " mismatch";
      } catch (const InvalidArgument& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("tensor 'bad'"), std::string::npos) << what;
        const std::string ok =
            broadcast ? "broadcast float32[10] root 0" : "allreduce float32[10] sum";
        const std::string odd_sent = [&]() -> std::string {
          switch (kind) {
            case Mismatch::kShape:
              return "allreduce float32[11] sum";
            case Mismatch::kDType:
              return "allreduce float64[10] sum";
            case Mismatch::kOp:
              return "allreduce float32[10] max";
            case Mismatch::kRoot:
              return "broadcast float32[10] root 1";
            case Mismatch::kScale:
              return "allreduce float32[10] sum prescale 2 postscale 1";
            default:
              return "";
          }
        }();
        EXPECT_NE(what.find(fmt::format("rank 0 sent {}", ok)), std::string::npos) << what;
        EXPECT_NE(what.find(fmt::format("rank {} sent {}", odd, odd_sent)), std::string::npos)
            << what;
      }
      EXPECT_EQ(engine->stats().mismatches, 1u);
    }

    // The engine stays usable: the next request (the same name too) succeeds.
    Buffer next(DType::kF64, 7);
    for (int64_t e = 0; e < 7; ++e) next.Set(e, rank * 10 + e);
    engine->AllReduce("bad", next.view(), next.view()).Wait();
    for (int64_t e = 0; e < 7; ++e) ASSERT_EQ(next.Get(e), 10.0 * n * (n - 1) / 2 + n * e);
  });
}

INSTANTIATE_TEST_SUITE_P(Kinds, FusionEngineMismatch,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values(Mismatch::kShape, Mismatch::kDType,
                                                              Mismatch::kOp, Mismatch::kRoot,
                                                              Mismatch::kScale, Mismatch::kMissing),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return fmt::format("n{}_{}_{}", std::get<0>(info.param),
                                              MismatchName(std::get<1>(info.param)),
                                              std::get<2>(info.param) ? "cached" : "fresh");
                         });

TEST(FusionEngineStall, ALateRankIsReportedWithTheMissingRanksThenTheRequestRuns) {
  constexpr int n = 3;
  base::ManualClock clock;
  CollectiveJob job(n);
  job.RunOk([&](int rank, CollectiveService& s) {
    FusionEngine::Options options = TestOptions(size_t{1} << 20);
    options.stall_check = std::chrono::milliseconds(50);
    options.stall_shutdown = std::chrono::milliseconds(0);  // report only
    auto engine = MakeEngine(s, n, options, &clock);
    Buffer b(DType::kI64, 9);
    for (int64_t e = 0; e < 9; ++e) b.Set(e, rank + 1);
    // The late ranks move the clock until the stall was reported (once,
    // however the steps fall), then submit.
    if (rank >= 1) {
      EXPECT_TRUE(AdvanceUntil(clock, std::chrono::milliseconds(10),
                               [&] { return engine->stats().stalls_reported == 1; }));
    }
    engine->AllReduce("late.grad", b.view(), b.view()).Wait();
    for (int64_t e = 0; e < 9; ++e) ASSERT_EQ(b.Get(e), 6);
    const FusionEngine::Stats st = engine->stats();
    EXPECT_EQ(st.stalls_reported, 1u);
    EXPECT_EQ(st.stalls_failed, 0u);
    EXPECT_NE(st.last_report.find("tensor 'late.grad' (allreduce int64[9] sum)"), std::string::npos)
        << st.last_report;
    EXPECT_NE(st.last_report.find("submitted by rank(s) 0, missing on rank(s) 1, 2"),
              std::string::npos)
        << st.last_report;
  });
}

TEST(FusionEngineArguments, OptionsPastTheMessageLimitsAreRefusedNamingThem) {
  CollectiveJob job(1);
  job.RunOk([&](int, CollectiveService& s) {
    for (auto change : std::vector<std::function<void(FusionEngine::Options&)>>{
             [](auto& o) { o.fusion_threshold = (size_t{1} << 36) + 1; },
             [](auto& o) { o.cycle_time = std::chrono::seconds(61); },
             [](auto& o) { o.cache_capacity = (size_t{1} << 20) + 1; }}) {
      FusionEngine::Options o = TestOptions(0);
      change(o);
      try {
        MakeEngine(s, 1, o);
        ADD_FAILURE() << "options accepted";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("FusionEngine options out of range"),
                  std::string::npos)
            << e.what();
      }
    }
    // The communicator is still usable: an engine with good options works.
    auto engine = MakeEngine(s, 1, TestOptions(0));
    Buffer b(DType::kF32, 3);
    for (int64_t e = 0; e < 3; ++e) b.Set(e, static_cast<double>(e));
    engine->AllReduce("x", b.view(), b.view()).Wait();
    EXPECT_EQ(b.Get(2), 2.0);
  });
}

TEST(FusionEngineArguments, BadRequestsAreRefusedAtOnceAndTheEngineGoesOn) {
  constexpr int n = 2;
  CollectiveJob job(n);
  job.RunOk([&](int rank, CollectiveService& s) {
    auto engine = MakeEngine(s, n, TestOptions(size_t{1} << 20));
    Buffer a(DType::kF32, 4), b(DType::kF32, 5), i(DType::kI32, 4);
    EXPECT_THROW(engine->AllReduce("", a.view(), a.view()), InvalidArgument);
    EXPECT_THROW(engine->AllReduce("x", a.view(), b.view()), InvalidArgument);
    ReduceOptions scaled;
    scaled.postscale = 0.5;
    EXPECT_THROW(engine->AllReduce("x", i.view(), i.view(), scaled), InvalidArgument);
    EXPECT_THROW(engine->Broadcast("x", a.view(), n), InvalidArgument);
    EXPECT_THROW(engine->Broadcast("x", a.view(), -1), InvalidArgument);
    // A name pending twice on one rank.
    for (int64_t e = 0; e < 4; ++e) a.Set(e, rank + 1);
    CollectiveHandle h;
    if (rank == 0) {
      h = engine->AllReduce("dup", a.view(), a.view());
      try {
        engine->AllReduce("dup", b.view(), b.view());
        ADD_FAILURE() << "a second pending 'dup' was accepted";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("'dup' is already pending on rank 0"),
                  std::string::npos)
            << e.what();
      }
    } else {
      h = engine->AllReduce("dup", a.view(), a.view());
    }
    h.Wait();
    EXPECT_EQ(a.Get(2), 3.0);
  });
}

TEST(FusionEngineFailure, ALostPeerFailsPendingAndLaterRequestsWithPeerLost) {
  constexpr int n = 3;
  constexpr int victim = 2;
  CollectiveJob job(n, testing::TestSettings(testing::kTestPatience));
  auto errors = job.Run([&](int rank, CollectiveService& s) {
    auto engine = MakeEngine(s, n, TestOptions(size_t{1} << 20));
    Buffer b(DType::kF32, 1000);
    engine->AllReduce("warm", b.view(), b.view()).Wait();
    if (rank == victim) {
      job.node(rank).transport->Shutdown();  // as if the process died
      try {
        engine.reset();
      } catch (...) {
      }
      return;
    }
    CollectiveHandle h = engine->AllReduce("after", b.view(), b.view());
    EXPECT_THROW(h.Wait(), PeerLost);
    CollectiveHandle later = engine->AllReduce("later", b.view(), b.view());
    try {
      later.Wait();
      ADD_FAILURE() << "rank " << rank << ": a request ran after the loss of rank " << victim;
    } catch (const PeerLost& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(victim)), std::string::npos) << e.what();
    }
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], nullptr)
        << "rank " << r << ": " << What(errors[static_cast<size_t>(r)]);
  }
}

TEST(FusionEngineCycleMessage, RoundTripsAndRefusesMalformedBytes) {
  CycleMessage m;
  m.stopping = true;
  m.clock_ms = 123456789;
  m.settings = {size_t{16} << 20, std::chrono::microseconds(2500),
                AllReduceAlgorithm::kHalvingDoubling};
  m.cache_capacity = 77;
  m.cached = {true, false, true, true, false, false, false, false, true, true};
  TensorRequest q;
  q.name = "fc.bias";
  q.dtype = DType::kBF16;
  q.shape = {3, 0, 7};
  q.op = Reduction::kAvg;
  q.prescale = 0.5;
  q.algorithm = AllReduceAlgorithm::kRing;
  m.requests = {q, TensorRequest{"embed", RequestKind::kBroadcast, DType::kI64, {9}}};
  const std::string bytes = m.Encode();
  const CycleMessage d = CycleMessage::Decode(bytes);
  EXPECT_EQ(d.stopping, true);
  EXPECT_EQ(d.clock_ms, 123456789);
  EXPECT_EQ(d.settings, m.settings);
  EXPECT_EQ(d.cache_capacity, 77u);
  EXPECT_EQ(d.cached, m.cached);
  ASSERT_EQ(d.requests.size(), 2u);
  EXPECT_EQ(d.requests[0], q);
  EXPECT_EQ(d.requests[1].Describe(), "broadcast int64[9] root 0");
  EXPECT_EQ(d.Encode(), bytes);
  // Every truncation, a trailing byte, and corrupted fields are refused.
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_THROW(CycleMessage::Decode(bytes.substr(0, cut)), ProtocolError) << cut;
  }
  EXPECT_THROW(CycleMessage::Decode(bytes + "x"), ProtocolError);
  std::string bad_bits = bytes;
  bad_bits[31] = static_cast<char>(0xff);  // bits 10..15 of a 10-bit map
  EXPECT_THROW(CycleMessage::Decode(bad_bits), ProtocolError);
  std::string bad_stop = bytes;
  bad_stop[0] = 2;
  EXPECT_THROW(CycleMessage::Decode(bad_stop), ProtocolError);
  // Settings past their limits: threshold (bytes 9..16), cycle time
  // (17..20), algorithm (21), cache capacity (22..25).
  for (const auto& [at, byte] : std::vector<std::pair<size_t, char>>{
           {16, 1}, {20, static_cast<char>(0x7f)}, {21, 9}, {25, 1}}) {
    std::string bad = bytes;
    bad[at] = byte;
    EXPECT_THROW(CycleMessage::Decode(bad), ProtocolError) << "byte " << at;
  }
  const size_t kind_at = 26 + 4 + 2 + 4 + 4 + q.name.size();
  std::string bad_kind = bytes;
  bad_kind[kind_at] = 7;
  EXPECT_THROW(CycleMessage::Decode(bad_kind), ProtocolError);
}

TEST(FusionEngineOptions, HorovodNamesAndTandemNamesAreRead) {
  auto o = FusionEngine::Options::FromEnvironment({{"HOROVOD_FUSION_THRESHOLD", "1024"},
                                                   {"HOROVOD_CYCLE_TIME", "2.5"},
                                                   {"HOROVOD_CACHE_CAPACITY", "7"},
                                                   {"HOROVOD_STALL_CHECK_TIME_SECONDS", "5"},
                                                   {"TANDEM_STALL_SHUTDOWN_TIME_SECONDS", "9"},
                                                   {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "1"}});
  EXPECT_EQ(o.fusion_threshold, 1024u);
  EXPECT_EQ(o.cycle_time, std::chrono::microseconds(2500));
  EXPECT_EQ(o.cache_capacity, 7u);
  EXPECT_EQ(o.stall_check, std::chrono::seconds(5));
  EXPECT_EQ(o.stall_shutdown, std::chrono::seconds(9));  // the TANDEM_ name wins
  auto d = FusionEngine::Options::FromEnvironment(
      {{"TANDEM_COLLECTIVE_TIMEOUT", "42"}, {"HOROVOD_STALL_CHECK_DISABLE", "1"}});
  EXPECT_EQ(d.fusion_threshold, size_t{128} << 20);
  EXPECT_EQ(d.cycle_time, std::chrono::milliseconds(1));
  EXPECT_EQ(d.stall_check, std::chrono::milliseconds(0));
  EXPECT_EQ(d.stall_shutdown, std::chrono::seconds(42));
  EXPECT_THROW(FusionEngine::Options::FromEnvironment({{"HOROVOD_CYCLE_TIME", "soon"}}),
               ConfigError);
  EXPECT_THROW(FusionEngine::Options::FromEnvironment({{"TANDEM_FUSION_THRESHOLD", "-1"}}),
               ConfigError);
}

}  // namespace
}  // namespace tandem::collective
