// The distributed store end to end over the in-process transport: exact
// sums of sync rounds, async updates, bad input that fails one call and
// leaves the store intact, and lost nodes.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "kv/kv_messages.h"
#include "kv/local_kvstore.h"
#include "kv/optimizer/optimizer.h"
#include "kv_job.h"
#include "typed_values.h"

namespace tandem::testing {
namespace {

using kv::DistKVStore;

// (servers, workers, elements, dtype); the big-array bound is 64 elements,
// so keys of 64 or more elements are split across the servers.
using SyncParam = std::tuple<int, int, int, DType>;
class DistSync : public ::testing::TestWithParam<SyncParam> {};

// Closed form: in round r worker w pushes (w+1)*(i%7+r) at element i; the
// merged sum is W(W+1)/2*(i%7+r) and without optimizer becomes the value.
TEST_P(DistSync, RoundsGiveExactSums) {
  // Named copies: clang 14 cannot capture structured bindings in lambdas.
  const auto servers = std::get<0>(GetParam());
  const auto workers = std::get<1>(GetParam());
  const auto n = std::get<2>(GetParam());
  const auto dtype = std::get<3>(GetParam());
  KvJobOptions o;
  o.servers = servers;
  o.workers = workers;
  o.big_array_bound = 64;
  KvJob job(o);
  const double tri = workers * (workers + 1) / 2.0;
  std::atomic<int> checked{0};
  auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
    EXPECT_EQ(kv.NumWorkers(), workers);
    EXPECT_EQ(kv.NumServers(), servers);
    Tensor init(dtype, {n}, [&](size_t i) { return rank == 0 ? double(i % 11) : -1.0; });
    kv.Init(5, init.view());
    Tensor out(dtype, {n});
    kv.Pull(5, out.view());
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out.at(i), double(i % 11)) << i;
    for (int r = 1; r <= 3; ++r) {
      Tensor g(dtype, {n}, [&](size_t i) { return (rank + 1) * double(i % 7 + r); });
      kv.Push(5, g.view());
      kv.Pull(5, out.view());
      for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out.at(i), tri * double(i % 7 + r)) << i;
    }
    // Push and pull without waiting in between: the pull still sees the round.
    Tensor g(dtype, {n}, [&](size_t i) { return (rank + 1) * double(i % 5); });
    KVHandle push = kv.PushAsync(5, {g.view()});
    KVHandle pull = kv.PullAsync(5, {out.view()});
    pull.Wait();
    push.Wait();
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out.at(i), tri * double(i % 5)) << i;
    // Two local devices per worker, and push-pull in one call.
    Tensor d0(dtype, {n}, [&](size_t i) { return double(rank) + double(i % 3); });
    Tensor d1(dtype, {n}, [&](size_t) { return 1.0; });
    Tensor out2(dtype, {n});
    kv.PushPullAsync(5, {d0.view(), d1.view()}, {out.view(), out2.view()}).Wait();
    const double ranks = workers * (workers - 1) / 2.0;
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_EQ(out.at(i), ranks + workers * (double(i % 3) + 1.0)) << i;
      ASSERT_EQ(out2.at(i), out.at(i)) << i;
    }
    ++checked;
  });
  ExpectNoErrors(errors);
  EXPECT_EQ(checked.load(), workers);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DistSync,
    ::testing::Values(SyncParam{1, 1, 10, DType::kF32}, SyncParam{1, 4, 10, DType::kF32},
                      SyncParam{2, 4, 63, DType::kF32}, SyncParam{2, 4, 64, DType::kF32},
                      SyncParam{2, 3, 1000, DType::kF64}, SyncParam{2, 4, 301, DType::kF16},
                      SyncParam{3, 2, 200, DType::kI32}, SyncParam{2, 2, 5000, DType::kI64}));

// String keys, several keys, and a key spread over servers: every key is its
// own round.
TEST(DistSync, StringKeysAndManyKeys) {
  KvJobOptions o;
  o.servers = 2;
  o.workers = 3;
  o.big_array_bound = 100;
  KvJob job(o);
  auto errors = job.Run("dist_sync_device", [&](KVStore& kv, int rank) {
    std::vector<std::string> names = {"fc1_weight", "fc1_bias", "embedding"};
    std::vector<int64_t> sizes = {7, 150, 1000};
    std::vector<Tensor> vals;
    for (size_t k = 0; k < names.size(); ++k) {
      vals.emplace_back(DType::kF32, std::vector<int64_t>{sizes[k]}, [](size_t) { return 0.0; });
      kv.Init(names[k], vals.back().view());
    }
    EXPECT_THROW(kv.Init(3, vals[0].view()), InvalidArgument);  // mixing kinds
    for (size_t k = 0; k < names.size(); ++k) {
      Tensor g(DType::kF32, {sizes[k]},
               [&](size_t i) { return double(k + 1) * (rank + 1) + double(i); });
      kv.Push(names[k], g.view(), static_cast<int>(k));
    }
    for (size_t k = 0; k < names.size(); ++k) {
      kv.Pull(names[k], vals[k].view());
      for (size_t i = 0; i < vals[k].size(); ++i) {
        ASSERT_EQ(vals[k].at(i), double(k + 1) * 6 + 3.0 * double(i)) << names[k] << " " << i;
      }
    }
  });
  ExpectNoErrors(errors);
}

// With the inflight window at one byte every request queues: priorities then
// decide, yet a pull never overtakes the push of its key.
TEST(DistSync, PrioritiesKeepPerKeyOrder) {
  KvJobOptions o;
  o.servers = 1;
  o.workers = 2;
  o.inflight_bytes = 1;
  KvJob job(o);
  auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
    constexpr int kKeys = 6;
    std::vector<Tensor> vals;
    for (int k = 0; k < kKeys; ++k) {
      vals.emplace_back(DType::kF32, std::vector<int64_t>{16});
      kv.Init(k, vals.back().view());
    }
    std::vector<Tensor> grads;
    for (int k = 0; k < kKeys; ++k) {
      grads.emplace_back(DType::kF32, std::vector<int64_t>{16},
                         [&](size_t i) { return k * 100.0 + rank + i; });
    }
    std::vector<KVHandle> handles;
    for (int k = 0; k < kKeys; ++k) {
      handles.push_back(kv.PushAsync(k, {grads[k].view()}, /*priority=*/0));
      handles.push_back(kv.PullAsync(k, {vals[k].view()}, /*priority=*/10 + k));
    }
    for (auto& h : handles) h.Wait();
    for (int k = 0; k < kKeys; ++k) {
      for (size_t i = 0; i < 16; ++i) ASSERT_EQ(vals[k].at(i), k * 200.0 + 1 + 2.0 * i) << k;
    }
  });
  ExpectNoErrors(errors);
}

// Async: every push is applied at once with the optimizer; after W workers
// each pushed N gradients of ones, w = init - lr * W * N exactly.
class DistAsync : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(DistAsync, EveryPushIsAppliedOnce) {
  // Named copies: clang 14 cannot capture structured bindings in lambdas.
  const auto servers = std::get<0>(GetParam());
  const auto workers = std::get<1>(GetParam());
  const auto n = std::get<2>(GetParam());
  KvJobOptions o;
  o.servers = servers;
  o.workers = workers;
  o.big_array_bound = 64;
  KvJob job(o);
  constexpr int kPushes = 20;
  auto errors = job.Run("dist_async", [&](KVStore& kv, int rank) {
    Tensor w(DType::kF32, {n}, [](size_t i) { return 1000.0 + double(i); });
    kv.Init(9, w.view());
    Tensor ones(DType::kF32, {n}, [](size_t) { return 1.0; });
    // Without an optimizer an async push fails on that worker only.
    if (rank == 0) {
      try {
        kv.Push(9, ones.view());
        ADD_FAILURE() << "an async push without optimizer succeeded";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("optimizer"), std::string::npos) << e.what();
      }
    }
    kv.SetOptimizer("sgd", {{"learning_rate", "0.5"}});
    std::vector<KVHandle> handles;
    for (int p = 0; p < kPushes; ++p) handles.push_back(kv.PushAsync(9, {ones.view()}));
    for (auto& h : handles) h.Wait();
    kv.Barrier();
    kv.Pull(9, w.view());
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_EQ(w.at(i), 1000.0 + double(i) - 0.5 * workers * kPushes) << i;
    }
  });
  ExpectNoErrors(errors);
}

INSTANTIATE_TEST_SUITE_P(Shapes, DistAsync,
                         ::testing::Values(std::tuple{1, 1, 8}, std::tuple{1, 4, 8},
                                           std::tuple{2, 4, 100}, std::tuple{2, 3, 1000}));

// Sync with the optimizer on the servers: one update per round with the
// merged gradient.
TEST(DistSync, OptimizerRunsOncePerRound) {
  KvJobOptions o;
  o.servers = 2;
  o.workers = 4;
  o.big_array_bound = 50;
  KvJob job(o);
  auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
    Tensor w(DType::kF32, {120}, [](size_t i) { return double(i); });
    kv.Init(1, w.view());
    kv.SetOptimizer("sgd", {{"learning_rate", "0.25"}});
    for (int r = 0; r < 3; ++r) {
      Tensor g(DType::kF32, {120}, [&](size_t) { return double(rank + 1); });
      kv.Push(1, g.view());
    }
    kv.Pull(1, w.view());
    // Each round: w -= 0.25 * (1+2+3+4) = 2.5.
    for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(w.at(i), double(i) - 7.5) << i;
    // update_on_kvstore=false is the store without optimizer: covered by
    // DistSync.RoundsGiveExactSums.
    kv.SaveOptimizerStates(::testing::TempDir() + "/kv_states_" + std::to_string(::getpid()));
    kv.LoadOptimizerStates(::testing::TempDir() + "/kv_states_" + std::to_string(::getpid()));
  });
  ExpectNoErrors(errors);
}

// A value that cannot train is refused on every worker before anything is
// sent (docs/optimizers.md, "Ranges"): each worker throws, the servers make
// only the valid optimizer that follows, and its round is exact.
TEST(DistSync, EveryWorkerRefusesAnOptimizerValueBeforeSending) {
  auto made = std::make_shared<std::atomic<int>>(0);
  KvJobOptions o;
  o.servers = 2;
  o.workers = 3;
  o.optimizer_factory = [made](const std::string& name, const kv::OptimizerParams& p) {
    ++*made;
    return kv::Optimizer::Create(name, p);
  };
  KvJob job(o);
  auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
    Tensor w(DType::kF32, {8}, [](size_t i) { return double(i); });
    kv.Init(1, w.view());
    for (const auto& [param, value, range] :
         std::vector<std::tuple<std::string, std::string, std::string>>{
             {"momentum", "5", "must be in [0, 1)"},
             {"learning_rate", "-1", "must be in [0, 3.4028235e+38]"},
             {"rescale_grad", "0", "must be in (0, 3.4028235e+38]"}}) {
      try {
        KVParams params{{"learning_rate", "0.5"}};
        params[param] = value;
        kv.SetOptimizer("sgd", params);
        ADD_FAILURE() << "rank " << rank << " accepted " << param << "=" << value;
      } catch (const InvalidArgument& e) {
        EXPECT_EQ(std::string(e.what()), "set_optimizer: optimizer 'sgd': parameter '" + param +
                                             "' is " + value + ", " + range);
      }
    }
    kv.SetOptimizer("sgd", {{"learning_rate", "0.25"}});
    Tensor g(DType::kF32, {8}, [&](size_t) { return double(rank + 1); });
    kv.Push(1, g.view());
    kv.Pull(1, w.view());
    // w -= 0.25 * (1 + 2 + 3).
    for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(w.at(i), double(i) - 1.5) << i;
  });
  ExpectNoErrors(errors);
  EXPECT_EQ(made->load(), 2);  // the valid optimizer, once per server
}

// Every bad input fails that call only; the value is unchanged and the next
// round is exact.
TEST(DistSync, BadInputFailsOneCallAndTheStoreGoesOn) {
  KvJobOptions o;
  o.servers = 2;
  o.workers = 3;
  o.big_array_bound = 40;
  KvJob job(o);
  auto expect_invalid = [](const std::function<void()>& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
    Tensor w(DType::kF32, {100}, [](size_t i) { return double(i); });
    kv.Init(4, w.view());
    Tensor wrong_dtype(DType::kF64, {100});
    Tensor wrong_shape(DType::kF32, {99});
    Tensor wrong_out(DType::kF32, {101});
    expect_invalid([&] { kv.Push(77, w.view()); }, "never initialised");
    expect_invalid([&] { kv.Pull(77, w.view()); }, "never initialised");
    expect_invalid([&] { kv.Push(4, wrong_dtype.view()); }, "expected dtype float32, got float64");
    expect_invalid([&] { kv.Push(4, wrong_shape.view()); }, "expected shape [100]");
    expect_invalid([&] { kv.Pull(4, wrong_out.view()); }, "got [101]");
    expect_invalid([&] { kv.Init(4, w.view()); }, "double init");
    expect_invalid([&] { kv.Init("s", w.view()); }, "mixing int and string keys");
    expect_invalid([&] { kv.Push(4, std::vector<TensorView>{}); }, "no values");
    Tensor rows_out(DType::kF32, {2});
    expect_invalid([&] { kv.RowSparsePull(4, rows_out.view(), {3, 1}); }, "ascending");

    Tensor g(DType::kF32, {100}, [&](size_t i) { return double(rank) * 2 + double(i); });
    kv.Push(4, g.view());
    kv.Pull(4, w.view());
    for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(w.at(i), 6.0 + 3.0 * double(i)) << i;
  });
  ExpectNoErrors(errors);
}

// The server's own checks: requests crafted past the worker's checks fail
// with an error naming key, expected and got, and leave the value as it was.
TEST(DistServer, RejectsBadRequestsAndKeepsTheValue) {
  KvJobOptions o;
  o.servers = 1;
  o.workers = 2;
  KvJob job(o);
  auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
    Tensor w(DType::kF32, {10}, [](size_t i) { return double(i); });
    kv.Init(2, w.view());
    kv::KvClient& client = job.client(rank);
    auto send = [&](uint16_t type, kv::KeyRequest q, std::vector<std::byte>* payload,
                    std::vector<std::byte>* dest) {
      auto op = std::make_shared<kv::KvOperation>("crafted request", std::chrono::seconds(10));
      kv::ClientRequest r;
      r.server = 0;
      r.type = type;
      r.key = q.key;
      r.meta = q.Encode();
      if (payload) r.payload.push_back(std::span<const std::byte>(*payload));
      if (dest) r.destination = std::span<std::byte>(*dest);
      client.Submit(op, {r});
      op->Wait();
    };
    kv::KeyRequest good;
    good.key = 2;
    good.worker_rank = rank;
    good.dtype = DType::kF32;
    good.total_elements = 10;
    good.count = 10;
    std::vector<std::byte> bytes(40), small(36);
    auto expect = [&](uint16_t type, kv::KeyRequest q, std::vector<std::byte>* p,
                      std::vector<std::byte>* d, const std::string& needle) {
      try {
        send(type, q, p, d);
        ADD_FAILURE() << "the server accepted a bad request; expected '" << needle << "'";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      }
    };
    kv::KeyRequest q = good;
    q.key = 3;
    expect(kv::kvmsg::kPush, q, &bytes, nullptr, "push before init");
    expect(kv::kvmsg::kPull, q, nullptr, &bytes, "does not hold");
    q = good;
    q.dtype = DType::kI32;
    expect(kv::kvmsg::kPush, q, &bytes, nullptr, "expected 10 float32 elements");
    q = good;
    q.total_elements = 12;
    q.count = 12;
    std::vector<std::byte> b48(48);
    expect(kv::kvmsg::kPush, q, &b48, nullptr, "got 12 float32");
    expect(kv::kvmsg::kPush, good, &small, nullptr, "expected 40 payload bytes, got 36");
    expect(kv::kvmsg::kInit, good, &bytes, nullptr, "double init");
    // A pull into a wrong-sized buffer is refused by the worker that asked.
    try {
      send(kv::kvmsg::kPull, good, nullptr, &small);
      ADD_FAILURE() << "a 40-byte reply went into a 36-byte buffer";
    } catch (const ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find("expected 36"), std::string::npos) << e.what();
    }
    // The value is untouched, and a round still works.
    kv.Pull(2, w.view());
    for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(w.at(i), double(i));
    Tensor g(DType::kF32, {10}, [&](size_t i) { return double(rank + 1) * double(i); });
    kv.Push(2, g.view());
    kv.Pull(2, w.view());
    for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(w.at(i), 3.0 * double(i));
  });
  ExpectNoErrors(errors);
}

TEST(DistSync, RowSparsePullMovesOnlyTheRows) {
  KvJobOptions o;
  o.servers = 2;
  o.workers = 2;
  o.big_array_bound = 30;
  KvJob job(o);
  auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
    // 10 rows of 4: split by rows across both servers.
    Tensor w(DType::kF32, {10, 4}, [](size_t i) { return double(i); });
    kv.Init(6, w.view());
    Tensor g(DType::kF32, {10, 4}, [&](size_t i) { return double(rank) + double(i); });
    kv.Push(6, g.view());
    std::vector<int64_t> rows = {0, 3, 4, 5, 9};
    Tensor out(DType::kF32, {5, 4});
    kv.RowSparsePull(6, out.view(), rows);
    for (size_t r = 0; r < rows.size(); ++r) {
      for (size_t c = 0; c < 4; ++c) {
        ASSERT_EQ(out.at(r * 4 + c), 1.0 + 2.0 * double(rows[r] * 4 + c)) << r << "," << c;
      }
    }
    Tensor none(DType::kF32, {0, 4});
    kv.RowSparsePull(6, none.view(), {});
  });
  ExpectNoErrors(errors);
}

// A lost server fails the pending call and every later one with PeerLost
// naming it.
TEST(DistLoss, LostServerFailsPendingAndLaterCalls) {
  KvJobOptions o;
  o.servers = 1;
  o.workers = 2;
  o.timings.heartbeat_timeout = milliseconds(1000);
  KvJob job(o);
  std::atomic<bool> pushed{false};
  auto errors = job.Run(
      "dist_sync",
      [&](KVStore& kv, int rank) {
        Tensor w(DType::kF32, {4});
        kv.Init(1, w.view());
        if (rank == 0) {
          // Worker 1 never pushes: this round stays open until the server dies.
          KVHandle h = kv.PushAsync(1, {w.view()});
          pushed = true;
          try {
            h.Wait(std::chrono::seconds(15));
            ADD_FAILURE() << "the push completed without its round";
          } catch (const PeerLost& e) {
            EXPECT_NE(std::string(e.what()).find("server"), std::string::npos) << e.what();
          }
          EXPECT_THROW(kv.Pull(1, w.view()), PeerLost);
        } else {
          try {
            kv.Barrier();  // ends with the job's failure
          } catch (const PeerLost&) {
          }
        }
        throw PeerLost("expected end");
      },
      [&](Membership&) {
        while (!pushed) std::this_thread::sleep_for(milliseconds(5));
        std::this_thread::sleep_for(milliseconds(50));
        job.node(0).transport->Shutdown();  // the server process dies
        throw PeerLost("this server died");
      });
  // Every node ends with the job's failure; the workers' checks are above.
  for (size_t i = 1; i < errors.size() - 1; ++i) {
    ASSERT_NE(errors[i], nullptr);
    EXPECT_TRUE(Is<PeerLost>(errors[i])) << What(errors[i]);
  }
}

}  // namespace
}  // namespace tandem::testing

namespace tandem::testing {
namespace {

// A scalar reference of MXNet's quantisers (docs/gradient-compression.md),
// written apart from src/kv/compression: returns what the server receives.
float ReferenceQuantise(bool two_bit, float t, float grad, float* residual) {
  float r = *residual + grad;
  float sent;
  if (two_bit) {
    sent = r >= t ? t : (r <= -t ? -t : 0.0f);
  } else {
    sent = r > t ? 1.0f : -1.0f;
  }
  *residual = r - sent;
  return sent;
}

// (two_bit, servers, elements); the bound is 40, so 100 elements are split
// on whole words.
class DistCompression : public ::testing::TestWithParam<std::tuple<bool, int, int>> {};

TEST_P(DistCompression, ServerSumsTheDequantisedPushes) {
  // Named copies: clang 14 cannot capture structured bindings in lambdas.
  const auto two_bit = std::get<0>(GetParam());
  const auto servers = std::get<1>(GetParam());
  const auto n = std::get<2>(GetParam());
  constexpr int kWorkers = 4;
  KvJobOptions o;
  o.servers = servers;
  o.workers = kWorkers;
  o.big_array_bound = 40;
  KvJob job(o);
  const float t = 0.5f;
  auto grad = [](int rank, int round, size_t i) {
    const float pattern[] = {0.6f, -0.9f, 0.2f, 0.0f, 0.3f, -0.2f};
    return pattern[i % 6] * static_cast<float>(rank + 1) + 0.05f * static_cast<float>(round);
  };
  auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
    kv.SetGradientCompression({{"type", two_bit ? "2bit" : "1bit"}, {"threshold", "0.5"}});
    Tensor w(DType::kF32, {n}, [](size_t i) { return double(i); });
    kv.Init(8, w.view());  // never compressed
    Tensor out(DType::kF32, {n});
    kv.Pull(8, out.view());
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out.at(i), double(i));
    std::vector<std::vector<float>> residual(kWorkers,
                                             std::vector<float>(static_cast<size_t>(n), 0.0f));
    for (int round = 0; round < 3; ++round) {
      Tensor g(DType::kF32, {n}, [&](size_t i) { return grad(rank, round, i); });
      kv.Push(8, g.view());
      kv.Pull(8, out.view());
      for (size_t i = 0; i < out.size(); ++i) {
        float sum = 0;
        for (int r = 0; r < kWorkers; ++r) {
          sum += ReferenceQuantise(two_bit, t, grad(r, round, i),
                                   &residual[static_cast<size_t>(r)][i]);
        }
        ASSERT_EQ(static_cast<float>(out.at(i)), sum) << "round " << round << " element " << i;
      }
    }
    EXPECT_THROW(kv.SetGradientCompression({{"type", "2bit"}}), InvalidArgument);  // after Init
  });
  ExpectNoErrors(errors);
}

INSTANTIATE_TEST_SUITE_P(Kinds, DistCompression,
                         ::testing::Values(std::tuple{true, 1, 10}, std::tuple{true, 2, 100},
                                           std::tuple{false, 2, 100}, std::tuple{false, 1, 33},
                                           std::tuple{true, 3, 1000}));

}  // namespace
}  // namespace tandem::testing

namespace tandem::testing {
namespace {

// Row-sparse pushes: only the named rows travel; a server holding none of a
// worker's rows still counts its (empty) push in the round. Without an
// optimizer the value becomes the round's sum, zero on rows nobody pushed.
class RowSparsePush : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(RowSparsePush, RoundsSumThePushedRows) {
  // Named copies: clang 14 cannot capture structured bindings in lambdas.
  const auto servers = std::get<0>(GetParam());
  const auto local = std::get<1>(GetParam());
  auto body = [](KVStore& kv, int rank, int workers) {
    Tensor w(DType::kF32, {10, 3}, [](size_t i) { return double(i); });
    kv.Init(2, w.view());
    // Worker r pushes rows {r, 9} with value r+1 (all on the last server's
    // side for row 9).
    std::vector<int64_t> ids = {rank, 9};
    Tensor rows(DType::kF32, {2, 3}, [&](size_t) { return double(rank + 1); });
    kv.RowSparsePush(2, rows.view(), ids);
    kv.Pull(2, w.view());
    for (int64_t row = 0; row < 10; ++row) {
      double want = row == 9 ? workers * (workers + 1) / 2.0 : (row < workers ? row + 1.0 : 0.0);
      for (size_t c = 0; c < 3; ++c) ASSERT_EQ(w.at(static_cast<size_t>(row) * 3 + c), want) << row;
    }
    Tensor bad(DType::kF32, {2, 4});
    EXPECT_THROW(kv.RowSparsePush(2, bad.view(), ids), InvalidArgument);
    EXPECT_THROW(kv.RowSparsePush(2, rows.view(), {9, 1}), InvalidArgument);
  };
  if (local) {
    kv::LocalKVStore kv("local", {}, nullptr);
    body(kv, 0, 1);
    return;
  }
  KvJobOptions o;
  o.servers = servers;
  o.workers = 3;
  o.big_array_bound = 12;  // 30 elements: split by rows
  KvJob job(o);
  ExpectNoErrors(job.Run("dist_sync", [&](KVStore& kv, int rank) { body(kv, rank, 3); }));
}

INSTANTIATE_TEST_SUITE_P(Stores, RowSparsePush,
                         ::testing::Values(std::tuple{1, false}, std::tuple{2, false},
                                           std::tuple{3, false}, std::tuple{0, true}));

}  // namespace
}  // namespace tandem::testing

namespace tandem::testing {
namespace {

// A lost worker: the others' open round can never complete; their pending
// push and every later call fail with PeerLost naming the lost node.
TEST(DistLoss, LostWorkerFailsTheOthersPendingCalls) {
  KvJobOptions o;
  o.servers = 1;
  o.workers = 3;
  o.timings.heartbeat_timeout = milliseconds(1000);
  KvJob job(o);
  std::atomic<int> checked{0};
  std::atomic<int> pushed{0};
  auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
    Tensor w(DType::kF32, {4});
    kv.Init(1, w.view());
    if (rank == 2) {
      // Dies once the others' pushes are pending.
      while (pushed < 2) std::this_thread::sleep_for(milliseconds(1));
      std::this_thread::sleep_for(milliseconds(20));
      for (int i = 1; i <= 3; ++i) {
        TestNode& n = job.node(static_cast<size_t>(i));
        if (n.membership->self().rank == 2) n.transport->Shutdown();  // this worker dies
      }
      throw PeerLost("this worker died");
    }
    KVHandle h = kv.PushAsync(1, {w.view()});
    ++pushed;
    try {
      h.Wait(std::chrono::seconds(15));
      ADD_FAILURE() << "the round completed without worker 2";
    } catch (const PeerLost& e) {
      EXPECT_NE(std::string(e.what()).find("worker 2"), std::string::npos) << e.what();
      ++checked;
    }
    EXPECT_THROW(kv.Pull(1, w.view()), PeerLost);
    EXPECT_THROW(kv.Barrier(), PeerLost);
    throw PeerLost("expected end");
  });
  EXPECT_EQ(checked.load(), 2);
  for (size_t i = 1; i < errors.size() - 1; ++i)
    EXPECT_TRUE(Is<PeerLost>(errors[i])) << What(errors[i]);
}

}  // namespace
}  // namespace tandem::testing

namespace tandem::testing {
namespace {

// A wait that runs out names the call and the server it waited for; the
// call still completes later.
TEST(DistHandles, TimeoutNamesTheCallAndTheServer) {
  KvJobOptions o;
  o.servers = 2;
  o.workers = 2;
  KvJob job(o);
  std::atomic<bool> timed_out{false};
  auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
    Tensor w(DType::kF32, {4});
    kv.Init(3, w.view());
    Tensor g(DType::kF32, {4}, [&](size_t) { return double(rank + 1); });
    if (rank == 0) {
      KVHandle h = kv.PushAsync(3, {g.view()});
      try {
        h.Wait(milliseconds(50));
        ADD_FAILURE() << "the round completed with one push";
      } catch (const Timeout& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("push of key 3"), std::string::npos) << what;
        EXPECT_NE(what.find("server " + std::to_string((3 * 9973) % 2)), std::string::npos) << what;
        EXPECT_FALSE(h.Done());
      }
      timed_out = true;
      h.Wait();
      EXPECT_TRUE(h.Done());
    } else {
      while (!timed_out) std::this_thread::sleep_for(milliseconds(5));
      kv.Push(3, g.view());
    }
    kv.Pull(3, w.view());
    for (size_t i = 0; i < 4; ++i) ASSERT_EQ(w.at(i), 3.0);
  });
  ExpectNoErrors(errors);
}

}  // namespace
}  // namespace tandem::testing

namespace tandem::testing {
namespace {

// With one request in flight at a time, waiting requests go out by priority:
// the server (async, one thread) applies them in that order.
TEST(DistPriorities, HigherPriorityGoesFirst) {
  KvJobOptions o;
  o.servers = 1;
  o.workers = 1;
  o.server_threads = 1;
  o.inflight_bytes = 1;
  o.update_log = std::make_shared<TestSgd::UpdateLog>();
  o.update_log->slow_key = 0;  // key 0 stays in flight while the rest queue
  KvJob job(o);
  auto errors = job.Run("dist_async", [&](KVStore& kv, int) {
    constexpr int kKeys = 6;
    std::vector<Tensor> vals;
    for (int k = 0; k < kKeys; ++k) {
      vals.emplace_back(DType::kF32, std::vector<int64_t>{256});
      kv.Init(k, vals.back().view());
    }
    kv.SetOptimizer("sgd", {{"learning_rate", "1"}});
    std::vector<KVHandle> hs;
    // Key 0 goes out at once and fills the window; the rest wait and leave
    // by priority: 3 (priority 9), 5 (7), 1 (5), then 2 and 4 (both 1, in
    // issue order).
    const int priorities[kKeys] = {0, 5, 1, 9, 1, 7};
    for (int k = 0; k < kKeys; ++k) hs.push_back(kv.PushAsync(k, {vals[k].view()}, priorities[k]));
    for (auto& h : hs) h.Wait();
  });
  ExpectNoErrors(errors);
  std::lock_guard lock(o.update_log->mu);
  EXPECT_EQ(o.update_log->keys, (std::vector<uint64_t>{0, 3, 5, 1, 2, 4}));
}

}  // namespace
}  // namespace tandem::testing
