// The parameter server in an elastic job (docs/elastic.md) over the
// in-process transport: with TANDEM_MIN_WORKERS, a worker that dies during
// dist_sync rounds leaves the job, and the servers complete its rounds with
// the workers that remain. The pulled values are checked exactly against
// their closed form: in round r worker w pushes (w+1)*(i%7+r), so a round
// sums (i%7+r) times the sum of (w+1) over the workers whose pushes it holds.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "kv_job.h"
#include "support/manual_time.h"
#include "typed_values.h"

namespace tandem::testing {
namespace {

using std::chrono::milliseconds;

// When the leaving worker dies, relative to round kLeaveRound.
enum class When {
  kBeforeItsPush,    // it never pushes that round; the others push after it died
  kWhileOthersWait,  // the others' pushes of that round wait for it when it dies
  kAfterItsPush,     // its push of that round reached every server, then it died
};

std::string WhenName(When w) {
  switch (w) {
    case When::kBeforeItsPush:
      return "BeforeItsPush";
    case When::kWhileOthersWait:
      return "WhileOthersWait";
    case When::kAfterItsPush:
      return "AfterItsPush";
  }
  return "?";
}

constexpr int kRounds = 5;
constexpr int kLeaveRound = 3;

// (servers, workers, leaving rank, when)
using ElasticParam = std::tuple<int, int, int, When>;
class DistElastic : public ::testing::TestWithParam<ElasticParam> {};

// Kills `rank`'s node: every connection it has closes, as a process's do
// when it is killed.
void Kill(KvJob& job, int servers, int workers, int rank) {
  for (int i = servers; i < servers + workers; ++i) {
    TestNode& n = job.node(static_cast<size_t>(i));
    if (n.membership->self().rank == rank) n.transport->Shutdown();
  }
}

// A server's tandem_kv_server_open_rounds.
double OpenRounds(const base::StatsRegistry& stats) {
  for (const auto& family : stats.Families()) {
    if (family.name == "tandem_kv_server_open_rounds") return family.series.at(0).gauge->value();
  }
  return -1;
}

TEST_P(DistElastic, RoundsCompleteWithTheWorkersThatRemain) {
  const int servers = std::get<0>(GetParam());
  const int workers = std::get<1>(GetParam());
  const int leaver = std::get<2>(GetParam());
  const When when = std::get<3>(GetParam());
  KvJobOptions o;
  o.servers = servers;
  o.workers = workers;
  o.big_array_bound = 64;  // the 100-element key is split across the servers
  o.env["TANDEM_MIN_WORKERS"] = std::to_string(workers - 1);
  KvJob job(o);
  const int64_t n = 100;
  const double all = workers * (workers + 1) / 2.0;  // sum of (w+1) over every worker
  const double rest = all - (leaver + 1);            // without the leaver
  std::atomic<int> others_pushed{0};
  std::atomic<bool> leaver_done{false};
  std::atomic<int> checked{0};
  auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
    // The others never wait for a leaver that failed for another reason.
    struct Done {
      std::atomic<bool>& done;
      bool leaver;
      ~Done() {
        if (leaver) done = true;
      }
    } done_on_exit{leaver_done, rank == leaver};
    Tensor value(DType::kF32, {n});
    kv.Init(5, value.view());
    for (int r = 1; r <= kRounds; ++r) {
      Tensor g(DType::kF32, {n}, [&](size_t i) { return (rank + 1) * double(i % 7 + r); });
      if (rank == leaver && r == kLeaveRound) {
        if (when == When::kWhileOthersWait) {
          while (others_pushed < workers - 1) std::this_thread::sleep_for(milliseconds(1));
          std::this_thread::sleep_for(milliseconds(20));
        }
        if (when == When::kAfterItsPush) {
          KVHandle push = kv.PushAsync(5, {g.view()});
          // Merged on every server: its round is open there (the others
          // have not pushed yet).
          EXPECT_TRUE(WaitFor([&] {
            for (int s = 0; s < servers; ++s) {
              if (OpenRounds(job.node(static_cast<size_t>(s)).stats) != 1) return false;
            }
            return true;
          }));
        }
        Kill(job, servers, workers, leaver);
        leaver_done = true;
        throw PeerLost("this worker died");
      }
      if (rank != leaver && r == kLeaveRound && when != When::kWhileOthersWait) {
        while (!leaver_done) std::this_thread::sleep_for(milliseconds(1));
      }
      KVHandle push = kv.PushAsync(5, {g.view()});
      if (r == kLeaveRound) ++others_pushed;
      push.Wait();
      kv.Pull(5, value.view());
      double sum = all;
      if (r > kLeaveRound || (r == kLeaveRound && when != When::kAfterItsPush)) sum = rest;
      for (size_t i = 0; i < value.size(); ++i) {
        ASSERT_EQ(value.at(i), sum * double(i % 7 + r)) << "round " << r << " element " << i;
      }
    }
    kv.Barrier();  // after the change reached the scheduler: every member has heard of it
    EXPECT_EQ(kv.NumWorkers(), workers - 1);
    ++checked;
  });
  EXPECT_EQ(checked.load(), workers - 1);
  for (size_t i = 0; i < errors.size(); ++i) {
    const bool is_leaver = static_cast<int>(i) >= servers &&
                           static_cast<int>(i) < servers + workers &&
                           job.node(i).membership->self().rank == leaver;
    if (is_leaver) {
      EXPECT_TRUE(Is<PeerLost>(errors[i])) << What(errors[i]);
    } else {
      EXPECT_EQ(errors[i], nullptr) << "node " << i << ": " << What(errors[i]);
    }
  }
  EXPECT_EQ(job.job().scheduler().scheduler->epoch(), 1U);
}

std::string ElasticName(const ::testing::TestParamInfo<ElasticParam>& info) {
  return "S" + std::to_string(std::get<0>(info.param)) + "W" +
         std::to_string(std::get<1>(info.param)) + "Leaver" +
         std::to_string(std::get<2>(info.param)) + WhenName(std::get<3>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Losses, DistElastic,
                         ::testing::Values(ElasticParam{1, 2, 1, When::kBeforeItsPush},
                                           ElasticParam{1, 3, 0, When::kWhileOthersWait},
                                           ElasticParam{2, 4, 3, When::kWhileOthersWait},
                                           ElasticParam{2, 4, 1, When::kAfterItsPush},
                                           ElasticParam{2, 3, 2, When::kBeforeItsPush},
                                           ElasticParam{1, 4, 2, When::kAfterItsPush}),
                         ElasticName);

// A worker the job went on without (its scheduler connection gone, its
// store connections still open, as behind a cut that healed) has its pushes
// refused by the servers, while the others' rounds stay exact.
TEST(DistElasticRefusal, APushFromAWorkerThatLeftIsRefused) {
  KvJobOptions o;
  o.servers = 1;
  o.workers = 3;
  o.env["TANDEM_MIN_WORKERS"] = "2";
  KvJob job(o);
  const int64_t n = 10;
  std::atomic<bool> refused{false};
  std::atomic<int> checked{0};
  auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
    Tensor value(DType::kF32, {n});
    kv.Init(5, value.view());
    if (rank == 2) {
      for (int i = 1; i <= 3; ++i) {
        TestNode& node = job.node(static_cast<size_t>(i));
        if (node.membership->self().rank == 2) node.membership->Close();
      }
      ASSERT_TRUE(WaitFor([&] { return job.node(0).membership->epoch() == 1; }));
      Tensor g(DType::kF32, {n}, [&](size_t) { return 100.0; });
      try {
        kv.Push(5, g.view());
        ADD_FAILURE() << "the push of a worker that left was taken";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("push from worker 2, which has left the job"),
                  std::string::npos)
            << e.what();
        refused = true;
      }
      throw PeerLost("left the job");
    }
    for (int r = 1; r <= 3; ++r) {
      Tensor g(DType::kF32, {n}, [&](size_t i) { return (rank + 1) * double(i % 7 + r); });
      kv.Push(5, g.view());
      kv.Pull(5, value.view());
      for (size_t i = 0; i < value.size(); ++i) {
        ASSERT_EQ(value.at(i), 3.0 * double(i % 7 + r)) << "round " << r << " element " << i;
      }
    }
    while (!refused) std::this_thread::sleep_for(milliseconds(1));
    kv.Pull(5, value.view());  // the refused push changed nothing
    for (size_t i = 0; i < value.size(); ++i) ASSERT_EQ(value.at(i), 3.0 * double(i % 7 + 3));
    ++checked;
  });
  EXPECT_TRUE(refused.load());
  EXPECT_EQ(checked.load(), 2);
}

}  // namespace
}  // namespace tandem::testing

namespace tandem::testing {
namespace {

// Worker 0 does the job-wide commands for everyone (Init's value,
// SetOptimizer); once it has left, the lowest remaining rank does them, so a
// set-optimizer after worker 0 died still reaches the servers.
TEST(DistElasticCommands, TheFirstRemainingWorkerSendsTheCommands) {
  KvJobOptions o;
  o.servers = 2;
  o.workers = 3;
  o.big_array_bound = 64;
  o.env["TANDEM_MIN_WORKERS"] = "2";
  KvJob job(o);
  const int64_t n = 100;
  std::atomic<int> checked{0};
  auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
    Tensor value(DType::kF32, {n}, [&](size_t i) { return rank == 0 ? double(i % 11) : -1.0; });
    kv.Init(5, value.view());
    if (rank == 0) {
      for (int i = 2; i < 5; ++i) {
        TestNode& node = job.node(static_cast<size_t>(i));
        if (node.membership->self().rank == 0) node.transport->Shutdown();
      }
      throw PeerLost("this worker died");
    }
    kv.Barrier();  // completes once worker 0 has left
    EXPECT_EQ(kv.NumWorkers(), 2);
    kv.SetOptimizer("sgd", {{"learning_rate", "0.5"}});
    Tensor g(DType::kF32, {n}, [&](size_t) { return double(rank + 1); });
    kv.Push(5, g.view());
    kv.Pull(5, value.view());
    for (size_t i = 0; i < value.size(); ++i) {
      ASSERT_EQ(value.at(i), double(i % 11) - 0.5 * (2 + 3)) << i;
    }
    ++checked;
  });
  EXPECT_EQ(checked.load(), 2);
}

}  // namespace
}  // namespace tandem::testing
