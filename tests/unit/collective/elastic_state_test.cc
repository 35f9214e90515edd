// The C++ elastic API (include/tandem/elastic.h; docs/elastic.md, "The
// elastic API"): TensorState's copies, and Run's loop over a job whose
// workers leave while they train. The training is momentum SGD on a
// gradient that is linear in the weights, so that the test can replay it:
// the survivors' final weights must equal a replay of the committed steps,
// each over the workers that were members when it ran.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collective/collective_service.h"
#include "collective/elastic_run.h"
#include "collective_job.h"
#include "support/manual_time.h"
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
  // A worker joins once the first has left, admitted at the commit that
  // ends step join_at - 1 (it trains from step join_at); 0: none joins.
  int64_t join_at = 0;
  // TANDEM_MIN_WORKERS; 0: the workers less the leavers. Above that the
  // losses take the job below its minimum: the survivors' regroup waits
  // until `joiners` workers joined, and no step runs below the minimum.
  int min_workers = 0;
  int joiners = 1;  // with join_at > 0: how many join (the lowest departed places)
};

std::string RunCaseName(const ::testing::TestParamInfo<ElasticRunCase>& info) {
  std::string name = "n" + std::to_string(info.param.workers);
  for (const Leaving& l : info.param.leaving) {
    name += "_worker_" + std::to_string(l.worker) + "_at_" +
            (l.before_step < 0 ? std::string("start") : std::to_string(l.before_step));
  }
  if (info.param.join_at > 0) {
    name += "_" + std::to_string(info.param.joiners) + "_joiner_at_" +
            std::to_string(info.param.join_at);
  }
  if (info.param.min_workers > 0) name += "_min_" + std::to_string(info.param.min_workers);
  return name;
}

// The places the joiners take: the lowest departed worker ranks.
std::vector<int> JoinedPlaces(const ElasticRunCase& c) {
  std::vector<int> places;
  for (const Leaving& l : c.leaving) places.push_back(l.worker);
  std::sort(places.begin(), places.end());
  places.resize(c.join_at > 0 ? static_cast<size_t>(c.joiners) : 0);
  return places;
}

// The members of each step: every worker, less those that left before it,
// and the departed places filled again from join_at on (the step a joiner
// trained from, which can be earlier than the case's: it is admitted at the
// first commit after it registered).
std::vector<std::vector<int>> MembersByStep(ElasticRunCase c, int64_t joined_from = 0) {
  if (joined_from > 0) c.join_at = joined_from;
  const std::vector<int> joined = JoinedPlaces(c);
  std::vector<std::vector<int>> out;
  for (int64_t step = 0; step < kSteps; ++step) {
    std::vector<int> members;
    for (int r = 0; r < c.workers; ++r) {
      bool gone = false;
      for (const Leaving& l : c.leaving) gone = gone || (l.worker == r && l.before_step <= step);
      if (c.join_at > 0 && step >= c.join_at &&
          std::find(joined.begin(), joined.end(), r) != joined.end()) {
        gone = false;
      }
      if (!gone) members.push_back(r);
    }
    out.push_back(members);
  }
  return out;
}

// The replay of the steps over `members_at`, from the starting weights of
// worker 0.
std::vector<double> Replay(const std::vector<std::vector<int>>& members_at) {
  std::vector<double> expected(kDim), velocity(kDim, 0.0);
  for (size_t i = 0; i < kDim; ++i) expected[i] = static_cast<double>(i % 7) - 3.0;
  for (int64_t step = 0; step < kSteps; ++step) {
    const auto& members = members_at[static_cast<size_t>(step)];
    const double lr = LearningRate(static_cast<int>(members.size()));
    for (size_t i = 0; i < kDim; ++i) {
      double sum = 0;
      for (int r : members) sum += Gradient(r, step, i, expected[i]);
      velocity[i] = kMomentum * velocity[i] + sum / static_cast<double>(members.size());
      expected[i] -= lr * velocity[i];
    }
  }
  return expected;
}

// One case's workers, joiner included, and what the test checks after.
class ElasticTraining {
 public:
  explicit ElasticTraining(const ElasticRunCase& c)
      : c_(c),
        members_at_(MembersByStep(c)),
        settings_(Settings(c)),
        job_(c.workers, settings_, {}, 0,
             {{"TANDEM_MIN_WORKERS", std::to_string(settings_.mesh.min_workers)}},
             c.join_at > 0 ? c.joiners : 0),
        committed_(static_cast<size_t>(c.workers)) {
    for (auto& k : committed_) k = -1;
  }

  // Every worker starts from weights of its own; Run's first Sync makes
  // them worker 0's. Each step averages the members' gradients
  // (allreduce), then momentum SGD at the learning rate a reset callback
  // sets from the world's size; the state (weights, momentum, step) is
  // committed after each step. A worker that leaves before a step's
  // allreduce makes that step raise MembershipChanged on every other; Run
  // restores the commit, regroups, calls the callback and syncs from rank 0
  // of the new world, and the step runs again over the survivors. A joiner
  // runs the same loop: the commit that ends step join_at - 1 sees it
  // waiting (the survivors hold that commit until rank 0 knows), raises
  // MembershipChanged, and the regroup admits it.
  void Worker(int rank, CollectiveService& s, bool joiner) {
    std::vector<double> w(kDim), v(kDim, 0.0);
    for (size_t i = 0; i < kDim; ++i) {
      // Worker 0's are the replay's; the others' are overwritten by Sync.
      w[i] = rank == 0 && !joiner ? static_cast<double>(i % 7) - 3.0 : 100.0 * (rank + 1) + 7;
    }
    elastic::TensorState state;
    state.AddTensor("weights", View(w));
    state.AddTensor("momentum", View(v));
    int64_t& step = state.AddCounter("step");
    double lr = LearningRate(s.World().size());
    std::vector<int> reset_sizes;
    state.RegisterResetCallback([&] {
      reset_sizes.push_back(s.World().size());
      lr = LearningRate(s.World().size());
    });
    int64_t leave_at = kSteps + 1;  // never
    for (const Leaving& l : c_.leaving) {
      if (l.worker == rank && !joiner) leave_at = l.before_step;
    }
    if (!joiner) {
      // Every worker's mesh is formed once all passed this barrier (a loss
      // while a mesh forms fails the job, elastic or not).
      EXPECT_EQ(s.Regroup().epoch, 0u);
    }
    if (leave_at == -1) {
      // Gone before the first Sync, which may then raise MembershipChanged
      // on some survivors and not on others: Run handles both.
      job_.node(rank).transport->Shutdown();
      return;
    }
    bool left = false;
    RunElastic(
        state, [&]() -> Communicator& { return s.World(); }, [&] { return s.Regroup(); },
        [&] {
          if (joiner && joined_from_ < 0) joined_from_ = step;  // after its first Sync
          while (step < kSteps) {
            std::vector<double> g(kDim);
            for (size_t i = 0; i < kDim; ++i) g[i] = Gradient(rank, step, i, w[i]);
            if (step == leave_at) {
              WaitForCommits(rank, step - 1);
              job_.node(rank).transport->Shutdown();  // as if the process died
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
            if (step == c_.join_at && s.World().size() < c_.workers) WaitForJoinerNews();
            state.Commit();  // the next step is the one to go back to
            if (!joiner) committed_[static_cast<size_t>(rank)] = step - 1;
          }
        },
        [&] { s.CheckJoins(); });
    if (left) return;
    ++finished_;
    EXPECT_EQ(step, kSteps) << "worker " << rank;
    EXPECT_EQ(s.World().size(), static_cast<int>(members_at_.back().size()));
    if (!joiner) {
      // One reset per regroup: one per change, or fewer when two leave
      // before the same step and one regroup sees both; the last one's
      // size is the final world's.
      const size_t changes = c_.leaving.size() + (c_.join_at > 0 ? 1 : 0);
      ASSERT_EQ(reset_sizes.empty(), changes == 0) << "worker " << rank;
      if (changes > 0) {
        EXPECT_EQ(reset_sizes.back(), static_cast<int>(members_at_.back().size()));
        EXPECT_LE(reset_sizes.size(), changes);
      }
      if (c_.join_at == 0) EXPECT_TRUE(std::is_sorted(reset_sizes.rbegin(), reset_sizes.rend()));
    }
    std::lock_guard lock(mu_);
    finals_.push_back(w);
  }

  void Run() {
    std::vector<std::future<std::exception_ptr>> joined;
    for (int j = 0; j < (c_.join_at > 0 ? c_.joiners : 0); ++j) {
      joined.push_back(std::async(std::launch::async, [this, j]() -> std::exception_ptr {
        const Leaving& first = c_.leaving.front();
        const int lowest = members_at_[static_cast<size_t>(first.before_step)].front();
        // Once the survivors committed the step the first departure
        // interrupted: the job formed, a place is free, and the regroup of
        // the departure is over (a joiner waiting then would be admitted
        // by it). Below the minimum the survivors commit nothing until the
        // joiners came: once the job is below it (a leaver may still be in
        // the held regroup then, and die at the step after the first
        // admission).
        const bool below = c_.min_workers > 0;
        if (!tandem::testing::WaitFor(
                [&] {
                  return below ? job_.scheduler().scheduler->BelowMinimum()
                               : committed_[static_cast<size_t>(lowest)] >= first.before_step;
                },
                std::chrono::seconds(60))) {
          return std::make_exception_ptr(
              Timeout(below ? std::string("the job did not go below its minimum within 60 s")
                            : fmt::format("worker {} did not commit step {} within 60 s", lowest,
                                          first.before_step)));
        }
        return job_.RunJoiner(
            j, [this](int rank, CollectiveService& s) { Worker(rank, s, /*joiner=*/true); });
      }));
    }
    job_.RunOk([this](int rank, CollectiveService& s) { Worker(rank, s, false); });
    std::vector<int> joiner_ranks;
    for (size_t j = 0; j < joined.size(); ++j) {
      std::exception_ptr e = joined[j].get();
      EXPECT_EQ(e, nullptr) << "joiner " << j << ": " << testing::What(e);
      joiner_ranks.push_back(job_.joiner(static_cast<int>(j)).membership->self().rank);
    }
    std::sort(joiner_ranks.begin(), joiner_ranks.end());
    EXPECT_EQ(joiner_ranks, JoinedPlaces(c_));
    EXPECT_EQ(finished_.load(), static_cast<int>(members_at_.back().size()));
    if (c_.min_workers > 0) {
      // Below the minimum the survivors waited in their regroup: the
      // joiners trained from the very step the losses interrupted.
      EXPECT_EQ(joined_from_.load(), c_.leaving.front().before_step);
    }
    if (c_.join_at > 0) {
      // Admitted at the first commit after it registered, at the latest the
      // one of step join_at - 1, where the survivors wait for it.
      EXPECT_GE(joined_from_.load(), c_.leaving.front().before_step);
      EXPECT_LE(joined_from_.load(), c_.join_at);
    }
    const std::vector<double> expected = Replay(MembersByStep(c_, joined_from_.load()));
    for (const auto& w : finals_) {
      for (size_t i = 0; i < kDim; ++i) {
        EXPECT_NEAR(w[i], expected[i], 1e-12 * std::max(1.0, std::abs(expected[i])))
            << "element " << i;
      }
    }
  }

 private:
  static CollectiveSettings Settings(const ElasticRunCase& c) {
    CollectiveSettings settings = testing::TestSettings();
    settings.mesh.min_workers =
        c.min_workers > 0 ? c.min_workers : c.workers - static_cast<int>(c.leaving.size());
    settings.mesh.verdict_wait = std::chrono::seconds(20);
    return settings;
  }

  // A worker leaves once every member committed the step before, so that
  // no survivor's step that it took part in is left under way (its last
  // pieces are sent, not just queued).
  void WaitForCommits(int rank, int64_t step) {
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (int r : members_at_[static_cast<size_t>(step)]) {
      while (committed_[static_cast<size_t>(r)] < step) {
        ASSERT_LT(std::chrono::steady_clock::now(), limit)
            << "worker " << rank << " waited for worker " << r << " to commit step " << step;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }

  // Holds the commit that admits the joiner until rank 0 of the world (the
  // lowest member) heard that it waits.
  void WaitForJoinerNews() {
    const int lowest = members_at_[static_cast<size_t>(c_.join_at - 1)].front();
    ASSERT_TRUE(tandem::testing::WaitFor(
        [&] { return job_.node(lowest).membership->joiners_waiting() > 0; },
        std::chrono::seconds(60)))
        << "worker " << lowest << " never heard of the joiner";
  }

  const ElasticRunCase c_;
  const std::vector<std::vector<int>> members_at_;
  const CollectiveSettings settings_;
  CollectiveJob job_;
  std::vector<std::atomic<int64_t>> committed_;  // by rank: the last step committed
  std::mutex mu_;
  std::vector<std::vector<double>> finals_;  // guarded by mu_
  std::atomic<int> finished_{0};
  std::atomic<int64_t> joined_from_{-1};  // the step the joiner trained from
};

class ElasticRun : public ::testing::TestWithParam<ElasticRunCase> {};

// The survivors (and a worker that joined) end at step kSteps with weights
// equal to a replay of the steps, each over the workers that were members
// when it ran, within a relative 1e-12.
TEST_P(ElasticRun, SurvivorsEndWithTheReplayOfTheCommittedSteps) {
  ElasticTraining training(GetParam());
  training.Run();
}

INSTANTIATE_TEST_SUITE_P(Changes, ElasticRun,
                         ::testing::Values(ElasticRunCase{3, {}}, ElasticRunCase{4, {{3, 4}}},
                                           ElasticRunCase{4, {{2, -1}}},
                                           ElasticRunCase{4, {{3, 4}, {0, 8}}},
                                           ElasticRunCase{5, {{2, 1}, {1, 1}}}),
                         RunCaseName);

// A worker that joins takes the departed worker's place and rank; when that
// was worker 0, the world puts it last, so that Sync hands out a
// survivor's state, not the joiner's.
INSTANTIATE_TEST_SUITE_P(Joins, ElasticRun,
                         ::testing::Values(ElasticRunCase{4, {{3, 4}}, 7},
                                           ElasticRunCase{4, {{0, 3}}, 6},
                                           ElasticRunCase{3, {{1, 2}}, 9}),
                         RunCaseName);

// Losses that take the job below its minimum: the survivors' regroup waits
// (the scheduler holds it) until workers join; with two places to fill, one
// worker is admitted per regroup and the members (the first joiner too)
// regroup again until the minimum is back. No step runs below it.
INSTANTIATE_TEST_SUITE_P(BelowTheMinimum, ElasticRun,
                         ::testing::Values(ElasticRunCase{3, {{1, 4}, {2, 4}}, 4, 2, 1},
                                           ElasticRunCase{4, {{1, 4}, {2, 4}, {3, 4}}, 4, 3, 2},
                                           ElasticRunCase{4, {{0, 5}, {2, 5}}, 5, 3, 1}),
                         RunCaseName);

}  // namespace
}  // namespace tandem::collective
