// The C++ elastic API (include/tandem/elastic.h; docs/elastic.md, "The
// elastic API"): TensorState's copies, and Run's loop over a job whose
// workers leave while they train. The training is momentum SGD on a
// gradient that is linear in the weights, so that the test can replay it:
// the survivors' final weights must equal a replay of the committed steps,
// each over the workers that were members when it ran.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collective/collective_service.h"
#include "collective/elastic_run.h"
#include "collective_job.h"
#include "tandem/elastic.h"
#include "tandem/error.h"

namespace tandem::collective {
namespace {

using testing::CollectiveJob;

TensorView View(std::vector<double>& v) {
  return {v.data(), DType::kF64, {static_cast<int64_t>(v.size())}};
}

TEST(ElasticTensorState, RestoreGoesBackToTheLastCommitAndKeepsCounterReferences) {
  std::vector<double> w = {1, 2, 3};
  elastic::TensorState state;
  state.AddTensor("w", View(w));
  int64_t& step = state.AddCounter("step", 5);
  EXPECT_EQ(&state.counter("step"), &step);
  w = {4, 5, 6};
  step = 9;
  state.Restore();  // the copy made when the tensor was added
  EXPECT_EQ(w, (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(step, 5);
  w[1] = 7;
  step = 6;
  state.Commit();
  w[1] = 8;
  step = 7;
  state.Restore();
  EXPECT_EQ(w, (std::vector<double>{1, 7, 3}));
  EXPECT_EQ(step, 6);
  EXPECT_EQ(&state.counter("step"), &step);
}

struct BadAddition {
  std::string label;
  std::function<void(elastic::TensorState&)> add;
  std::string message;
};

class ElasticTensorStateRefuses : public ::testing::TestWithParam<BadAddition> {};

// The tensor every refusal case's state holds.
std::vector<double>& Held() {
  static std::vector<double> held(4, 1.0);
  return held;
}

TEST_P(ElasticTensorStateRefuses, NamingWhatWasWrong) {
  elastic::TensorState state;
  state.AddTensor("w", View(Held()));
  state.AddCounter("step");
  try {
    GetParam().add(state);
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(GetParam().message), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Additions, ElasticTensorStateRefuses,
    ::testing::Values(
        BadAddition{"repeated_tensor", [](auto& s) { s.AddTensor("w", View(Held())); },
                    "'w' was added already"},
        BadAddition{"empty_tensor_name", [](auto& s) { s.AddTensor("", View(Held())); },
                    "an empty name"},
        BadAddition{"no_data",
                    [](auto& s) {
                      s.AddTensor("v", TensorView{nullptr, DType::kF32, {3}});
                    },
                    "'v' has 3 elements but no data"},
        BadAddition{"repeated_counter", [](auto& s) { s.AddCounter("step"); },
                    "'step' was added already"},
        BadAddition{"unknown_counter", [](auto& s) { s.counter("epoch"); }, "no counter 'epoch'"},
        BadAddition{"empty_callback", [](auto& s) { s.RegisterResetCallback({}); },
                    "an empty function"}),
    [](const ::testing::TestParamInfo<BadAddition>& param) { return param.param.label; });

// The workers' gradient: linear in the weights, different on every worker
// and step, in integers and halves so that its terms are exact.
double Gradient(int worker, int64_t step, size_t i, double w) {
  return 0.5 * w + static_cast<double>((worker + 1) * static_cast<int>((i + step) % 5)) - 2.0;
}

constexpr size_t kDim = 24;
constexpr int64_t kSteps = 12;
constexpr double kMomentum = 0.9;
double LearningRate(int size) { return 0.01 * size; }  // the linear scaling rule

struct Leaving {
  int worker;
  int64_t before_step;  // vanishes before this step's allreduce; -1: before Run
};

struct ElasticRunCase {
  int workers;
  std::vector<Leaving> leaving;  // by step
};

std::string RunCaseName(const ::testing::TestParamInfo<ElasticRunCase>& info) {
  std::string name = "n" + std::to_string(info.param.workers);
  for (const Leaving& l : info.param.leaving) {
    name += "_worker_" + std::to_string(l.worker) + "_at_" +
            (l.before_step < 0 ? std::string("start") : std::to_string(l.before_step));
  }
  return name;
}

class ElasticRun : public ::testing::TestWithParam<ElasticRunCase> {};

// Every worker starts from weights of its own; Run's first Sync makes them
// worker 0's. Each step averages the members' gradients (allreduce), then
// momentum SGD at the learning rate a reset callback sets from the world's
// size; the state (weights, momentum, step) is committed after each step. A
// worker that leaves before a step's allreduce makes that step raise
// MembershipChanged on every other; Run restores the commit, regroups, calls
// the callback and syncs from the lowest remaining worker, and the step runs
// again over the survivors.
TEST_P(ElasticRun, SurvivorsEndWithTheReplayOfTheCommittedSteps) {
  const ElasticRunCase c = GetParam();
  CollectiveSettings settings = testing::TestSettings();
  settings.mesh.min_workers = c.workers - static_cast<int>(c.leaving.size());
  settings.mesh.verdict_wait = std::chrono::seconds(20);
  CollectiveJob job(c.workers, settings, {}, 0,
                    {{"TANDEM_MIN_WORKERS", std::to_string(settings.mesh.min_workers)}});

  // The replay: the members of each step, from the starting weights of
  // worker 0.
  std::vector<double> expected(kDim), velocity(kDim, 0.0);
  for (size_t i = 0; i < kDim; ++i) expected[i] = static_cast<double>(i % 7) - 3.0;
  std::vector<int> members;
  for (int r = 0; r < c.workers; ++r) members.push_back(r);
  std::vector<std::vector<int>> members_at;  // by step
  for (int64_t step = 0; step < kSteps; ++step) {
    for (const Leaving& l : c.leaving) {
      if (l.before_step <= step) std::erase(members, l.worker);
    }
    members_at.push_back(members);
    const double lr = LearningRate(static_cast<int>(members.size()));
    for (size_t i = 0; i < kDim; ++i) {
      double sum = 0;
      for (int r : members) sum += Gradient(r, step, i, expected[i]);
      velocity[i] = kMomentum * velocity[i] + sum / static_cast<double>(members.size());
      expected[i] -= lr * velocity[i];
    }
  }

  // The last step each worker committed: a worker leaves once every member
  // committed the step before, so that no survivor's step that it took part
  // in is left under way (its last pieces are sent, not just queued).
  std::vector<std::atomic<int64_t>> committed(static_cast<size_t>(c.workers));
  for (auto& k : committed) k = -1;
  std::mutex mu;
  std::vector<std::vector<double>> finals;
  std::atomic<int> survivors{0};
  job.RunOk([&](int rank, CollectiveService& s) {
    std::vector<double> w(kDim), v(kDim, 0.0);
    for (size_t i = 0; i < kDim; ++i) {
      // Worker 0's are the replay's; the others' are overwritten by Sync.
      w[i] = rank == 0 ? static_cast<double>(i % 7) - 3.0 : 100.0 * (rank + 1);
    }
    elastic::TensorState state;
    state.AddTensor("weights", View(w));
    state.AddTensor("momentum", View(v));
    int64_t& step = state.AddCounter("step");
    double lr = LearningRate(c.workers);
    std::vector<int> reset_sizes;
    state.RegisterResetCallback([&] {
      reset_sizes.push_back(s.World().size());
      lr = LearningRate(s.World().size());
    });
    int64_t leave_at = kSteps + 1;  // never
    for (const Leaving& l : c.leaving) {
      if (l.worker == rank) leave_at = l.before_step;
    }
    // Every worker's mesh is formed once all passed this barrier (a loss
    // while a mesh forms fails the job, elastic or not).
    EXPECT_EQ(s.Regroup().epoch, 0u);
    if (leave_at == -1) {
      // Gone before the first Sync, which may then raise MembershipChanged
      // on some survivors and not on others: Run handles both.
      job.node(rank).transport->Shutdown();
      return;
    }
    bool left = false;
    RunElastic(
        state, [&]() -> Communicator& { return s.World(); }, [&] { return s.Regroup(); },
        [&] {
          while (step < kSteps) {
            std::vector<double> g(kDim);
            for (size_t i = 0; i < kDim; ++i) g[i] = Gradient(rank, step, i, w[i]);
            if (step == leave_at) {
              const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(60);
              for (int r : members_at[static_cast<size_t>(step - 1)]) {
                while (committed[static_cast<size_t>(r)] < step - 1) {
                  ASSERT_LT(std::chrono::steady_clock::now(), limit)
                      << "worker " << rank << " waited for worker " << r << " to commit step "
                      << step - 1;
                  std::this_thread::sleep_for(std::chrono::milliseconds(1));
                }
              }
              job.node(rank).transport->Shutdown();  // as if the process died
              left = true;
              return;
            }
            ReduceOptions avg;
            avg.op = Reduction::kAvg;
            avg.name = "gradient";
            s.World().AllReduce(View(g), View(g), avg);
            for (size_t i = 0; i < kDim; ++i) {
              v[i] = kMomentum * v[i] + g[i];
              w[i] -= lr * v[i];
            }
            ++step;
            state.Commit();  // the next step is the one to go back to
            committed[static_cast<size_t>(rank)] = step - 1;
          }
        });
    if (left) return;
    ++survivors;
    EXPECT_EQ(step, kSteps) << "worker " << rank;
    // One reset per regroup: one per leaving worker, or fewer when two leave
    // before the same step and one regroup sees both.
    ASSERT_EQ(reset_sizes.empty(), c.leaving.empty()) << "worker " << rank;
    if (!c.leaving.empty()) {
      EXPECT_EQ(reset_sizes.back(), c.workers - static_cast<int>(c.leaving.size()));
      EXPECT_LE(reset_sizes.size(), c.leaving.size());
      EXPECT_TRUE(std::is_sorted(reset_sizes.rbegin(), reset_sizes.rend()));
    }
    std::lock_guard lock(mu);
    finals.push_back(w);
  });
  EXPECT_EQ(survivors.load(), c.workers - static_cast<int>(c.leaving.size()));
  for (const auto& w : finals) {
    for (size_t i = 0; i < kDim; ++i) {
      EXPECT_NEAR(w[i], expected[i], 1e-12 * std::max(1.0, std::abs(expected[i])))
          << "element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Changes, ElasticRun,
                         ::testing::Values(ElasticRunCase{3, {}}, ElasticRunCase{4, {{3, 4}}},
                                           ElasticRunCase{4, {{2, -1}}},
                                           ElasticRunCase{4, {{3, 4}, {0, 8}}},
                                           ElasticRunCase{5, {{2, 1}, {1, 1}}}),
                         RunCaseName);

}  // namespace
}  // namespace tandem::collective
