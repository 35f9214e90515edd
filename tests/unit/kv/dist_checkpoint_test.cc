// Store checkpoints across a whole in-process job (docs/checkpoints.md):
// a job pushes, checkpoints, pushes more; a fresh job loads the checkpoint
// and holds exactly the checkpointed values and optimizer state (its next
// rounds give exactly the first job's), every worker gets its own bytes back,
// a damaged newest round falls back to the previous one, and a job of
// another shape is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <tuple>

#include "kv/checkpoint_directory.h"
#include "kv/optimizer/optimizer.h"
#include "kv_job.h"
#include "typed_values.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kWorkers = 2;
constexpr int64_t kRows = 8;
constexpr int64_t kCols = 5;  // keys are [8, 5]: 40 elements, split over the servers

std::string FreshDir(const std::string& name) {
  std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  for (char& c : test) {
    if (c == '/') c = '_';
  }
  const fs::path p =
      fs::path(::testing::TempDir()) / (name + "_" + std::to_string(::getpid()) + "_" + test);
  fs::remove_all(p);
  return p.string();
}

KvJobOptions Options(int servers) {
  KvJobOptions o;
  o.servers = servers;
  o.workers = kWorkers;
  o.big_array_bound = 16;
  o.optimizer_factory = [](const std::string& name, const kv::OptimizerParams& p) {
    return kv::Optimizer::Create(name, p);
  };
  return o;
}

const KVParams kSgd = {{"learning_rate", "0.5"}, {"momentum", "0.5"}};

// Worker `rank`'s gradient of key k in round r: (rank+1)*(i%5 + r + k).
double Grad(int rank, int k, int r, size_t i) { return (rank + 1) * double(i % 5 + r + k); }

// Key k's value after `rounds` rounds of both workers from w0 = i%3 - k,
// by MXNet's sgd with momentum: mom = 0.5*mom - 0.5*g; w += mom (all values
// dyadic with few bits, so exact in float32 and float64).
double Expected(int k, int rounds, size_t i) {
  double w = double(i % 3) - k;
  double mom = 0;
  for (int r = 1; r <= rounds; ++r) {
    const double g = Grad(0, k, r, i) + Grad(1, k, r, i);
    mom = 0.5 * mom - 0.5 * g;
    w += mom;
  }
  return w;
}

void InitKeys(KVStore& kv, DType dtype, int keys, bool real_values) {
  for (int k = 0; k < keys; ++k) {
    Tensor w(dtype, {kRows, kCols},
             [&](size_t i) { return real_values ? double(i % 3) - k : -7.0; });
    kv.Init(k, w.view());
  }
  kv.SetOptimizer("sgd", kSgd);
}

void PushRounds(KVStore& kv, DType dtype, int keys, int rank, int first, int last) {
  for (int r = first; r <= last; ++r) {
    for (int k = 0; k < keys; ++k) {
      Tensor g(dtype, {kRows, kCols}, [&](size_t i) { return Grad(rank, k, r, i); });
      kv.Push(k, g.view());
    }
  }
}

void ExpectValues(KVStore& kv, DType dtype, int keys, int rounds) {
  for (int k = 0; k < keys; ++k) {
    Tensor out(dtype, {kRows, kCols});
    kv.Pull(k, out.view());
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_EQ(out.at(i), Expected(k, rounds, i)) << "key " << k << " element " << i;
    }
  }
}

std::string UserState(int rank, int step) {
  return std::string("worker ") + std::to_string(rank) + " step " + std::to_string(step) +
         std::string("\0\xff", 2);
}

// (servers, dtype, keys)
using Param = std::tuple<int, DType, int>;
class DistCheckpoint : public ::testing::TestWithParam<Param> {};

TEST_P(DistCheckpoint, FreshJobLoadsExactlyTheCheckpointedStore) {
  const int servers = std::get<0>(GetParam());
  const DType dtype = std::get<1>(GetParam());
  const int keys = std::get<2>(GetParam());
  const std::string dir = FreshDir("dist_ckpt");
  {
    KvJob job(Options(servers));
    auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
      InitKeys(kv, dtype, keys, true);
      PushRounds(kv, dtype, keys, rank, 1, 3);
      EXPECT_EQ(kv.SaveCheckpoint(dir, UserState(rank, 3)), 3u);
      PushRounds(kv, dtype, keys, rank, 4, 5);
      ExpectValues(kv, dtype, keys, 5);
    });
    ExpectNoErrors(errors);
  }
  ASSERT_TRUE(fs::exists(dir + "/round-3/MANIFEST"));
  EXPECT_EQ(kv::VerifyCheckpointRound(dir, 3).num_servers, static_cast<uint32_t>(servers));
  {
    // A fresh job: other initial values and a fresh optimizer, then the
    // checkpoint. Its values are round 3's, and its next two rounds give
    // exactly round 5's: the momentum came back too.
    KvJob job(Options(servers));
    std::atomic<int> loaded{0};
    auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
      InitKeys(kv, dtype, keys, false);
      const auto c = kv.LoadCheckpoint(dir);
      ASSERT_TRUE(c.has_value());
      EXPECT_EQ(c->round, 3u);
      EXPECT_EQ(c->user_state, UserState(rank, 3));
      ExpectValues(kv, dtype, keys, 3);
      kv.Barrier();  // every pull done before the next round's pushes
      PushRounds(kv, dtype, keys, rank, 4, 5);
      ExpectValues(kv, dtype, keys, 5);
      // Rounds count on from the loaded one.
      EXPECT_EQ(kv.SaveCheckpoint(dir, UserState(rank, 5)), 5u);
      ++loaded;
    });
    ExpectNoErrors(errors);
    EXPECT_EQ(loaded.load(), kWorkers);
  }
  // Both rounds complete and kept.
  EXPECT_EQ(kv::ListCheckpointRounds(dir), (std::vector<uint64_t>{5, 3}));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(ServersDTypesKeys, DistCheckpoint,
                         ::testing::Combine(::testing::Values(1, 2, 3),
                                            ::testing::Values(DType::kF32, DType::kF64),
                                            ::testing::Values(1, 3)));

// Saves rounds 1, 2 and 3 with 2 servers; only the two newest stay.
std::string SaveThreeRounds(const std::string& name) {
  const std::string dir = FreshDir(name);
  KvJob job(Options(2));
  auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
    InitKeys(kv, DType::kF32, 2, true);
    for (int r = 1; r <= 3; ++r) {
      PushRounds(kv, DType::kF32, 2, rank, r, r);
      EXPECT_EQ(kv.SaveCheckpoint(dir, UserState(rank, r)), static_cast<uint64_t>(r));
    }
  });
  ExpectNoErrors(errors);
  EXPECT_EQ(kv::ListCheckpointRounds(dir), (std::vector<uint64_t>{3, 2}));
  return dir;
}

// (which file of the newest round is damaged)
class DistCheckpointFallback : public ::testing::TestWithParam<std::string> {};

TEST_P(DistCheckpointFallback, DamagedNewestRoundFallsBackToThePrevious) {
  const std::string dir = SaveThreeRounds("dist_ckpt_fallback");
  const std::string damaged = dir + "/round-3/" + GetParam();
  {
    std::fstream f(damaged, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x5a');
  }
  KvJob job(Options(2));
  auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
    InitKeys(kv, DType::kF32, 2, false);
    const auto c = kv.LoadCheckpoint(dir);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->round, 2u);
    EXPECT_EQ(c->user_state, UserState(rank, 2));
    ExpectValues(kv, DType::kF32, 2, 2);
  });
  ExpectNoErrors(errors);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Files, DistCheckpointFallback,
                         ::testing::Values("server-1.ckpt", "worker-1.ckpt", "MANIFEST"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string n = p.param;
                           for (char& c : n) {
                             if (c == '.' || c == '-') c = '_';
                           }
                           return n;
                         });

// (servers of the loading job) against a checkpoint of 2 servers.
class DistCheckpointShape : public ::testing::TestWithParam<int> {};

TEST_P(DistCheckpointShape, OtherServerCountIsRefusedAndNothingLoads) {
  const std::string dir = SaveThreeRounds("dist_ckpt_shape");
  KvJob job(Options(GetParam()));
  std::mutex mu;
  std::vector<std::string> messages;
  auto errors = job.Run("dist_sync", [&](KVStore& kv, int) {
    InitKeys(kv, DType::kF32, 2, true);
    try {
      kv.LoadCheckpoint(dir);
      ADD_FAILURE() << "a checkpoint of 2 servers loaded into " << GetParam();
    } catch (const Error& e) {
      std::lock_guard lock(mu);
      messages.push_back(e.what());
    }
    ExpectValues(kv, DType::kF32, 2, 0);  // untouched
  });
  ExpectNoErrors(errors);
  ASSERT_EQ(messages.size(), static_cast<size_t>(kWorkers));
  for (const std::string& m : messages) {
    EXPECT_NE(m.find("written by a job of 2 servers and 2 workers; this job has " +
                     std::to_string(GetParam()) + " servers"),
              std::string::npos)
        << m;
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Servers, DistCheckpointShape, ::testing::Values(1, 3));

// Gradient compression's residuals are a worker's own state: they come back
// with its file, so the rounds after a load quantise exactly as the first
// job's did. (Without an optimizer the value is each round's merged sum,
// which depends on the residuals.)
class DistCheckpointCompression : public ::testing::TestWithParam<const char*> {};

TEST_P(DistCheckpointCompression, ResidualsComeBack) {
  const std::string type = GetParam();
  const std::string dir = FreshDir("dist_ckpt_residuals");
  const KVParams compression = {{"type", type}, {"threshold", "0.5"}};
  constexpr int64_t kElements = 40;
  // Small against the threshold: most pushes send 0 and carry the rest over.
  auto grad = [](int rank, int, size_t i) { return 0.2 * (rank + 1) * double(1 + i % 2); };
  auto push = [&](KVStore& kv, int rank, int first, int last) {
    for (int r = first; r <= last; ++r) {
      Tensor g(DType::kF32, {kElements}, [&](size_t i) { return grad(rank, r, i); });
      kv.Push(0, g.view());
    }
  };
  std::vector<double> first_job;
  {
    KvJob job(Options(2));
    auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
      kv.SetGradientCompression(compression);
      Tensor w(DType::kF32, {kElements});
      kv.Init(0, w.view());
      push(kv, rank, 1, 3);
      EXPECT_EQ(kv.SaveCheckpoint(dir, ""), 3u);
      push(kv, rank, 4, 5);
      Tensor out(DType::kF32, {kElements});
      kv.Pull(0, out.view());
      if (rank == 0) {
        for (size_t i = 0; i < out.size(); ++i) first_job.push_back(out.at(i));
      }
    });
    ExpectNoErrors(errors);
  }
  // The saved residuals are not all zero, or this test would prove nothing.
  const std::string path = dir + "/round-3/worker-1.ckpt";
  const auto saved = kv::DecodeWorkerCheckpoint(kv::ReadCheckpointFile(path), path);
  ASSERT_EQ(saved.residuals.size(), 1u);
  ASSERT_EQ(saved.residuals[0].values.size(), static_cast<size_t>(kElements));
  double magnitude = 0;
  for (float v : saved.residuals[0].values) magnitude += std::abs(v);
  EXPECT_GT(magnitude, 1.0);
  {
    KvJob job(Options(2));
    auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
      kv.SetGradientCompression(compression);
      Tensor w(DType::kF32, {kElements}, [](size_t) { return -7.0; });
      kv.Init(0, w.view());
      ASSERT_TRUE(kv.LoadCheckpoint(dir).has_value());
      push(kv, rank, 4, 5);
      Tensor out(DType::kF32, {kElements});
      kv.Pull(0, out.view());
      ASSERT_EQ(first_job.size(), out.size());
      for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out.at(i), first_job[i]) << i;
    });
    ExpectNoErrors(errors);
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Kinds, DistCheckpointCompression, ::testing::Values("2bit", "1bit"));

TEST(DistCheckpointEmpty, NothingToLoadOnEveryWorker) {
  const std::string dir = FreshDir("dist_ckpt_empty");
  KvJob job(Options(2));
  std::atomic<int> empty{0};
  auto errors = job.Run("dist_sync", [&](KVStore& kv, int) {
    InitKeys(kv, DType::kF32, 1, true);
    if (!kv.LoadCheckpoint(dir).has_value()) ++empty;
    ExpectValues(kv, DType::kF32, 1, 0);
  });
  ExpectNoErrors(errors);
  EXPECT_EQ(empty.load(), kWorkers);
}

}  // namespace
}  // namespace tandem::testing
