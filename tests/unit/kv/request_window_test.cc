// A server's bound on what one worker may have unanswered
// (kv/request_window.h, docs/kvstore.md "Bounded memory"): a worker pushing
// dist_sync rounds far ahead of the others is held back by its own window
// and never refused, the server holding at most the bound for it; a worker
// that ignores the bound gets its excess refused with an error naming the
// setting, and the job goes on with exact sums.
#include "kv/request_window.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <tuple>
#include <vector>

#include "kv/kv_messages.h"
#include "kv_job.h"
#include "support/peak_sampler.h"
#include "typed_values.h"

namespace tandem::testing {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kKey = 5;

// Worker w's gradient of round r at element i: (w+1)*(r+1) + i. Two workers'
// sum, which the server (without optimizer) makes the value: 3*(r+1) + 2*i.
std::vector<float> Gradient(int worker, int round, int n) {
  std::vector<float> g(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) g[static_cast<size_t>(i)] = float((worker + 1) * (round + 1) + i);
  return g;
}

kv::KeyRequest PushRequest(int rank, int n) {
  kv::KeyRequest q;
  q.key = kKey;
  q.worker_rank = rank;
  q.dtype = DType::kF32;
  q.mode = kv::UpdateMode::kSync;
  q.total_elements = static_cast<uint64_t>(n);
  q.count = static_cast<uint64_t>(n);
  return q;
}

// Submits one push of `g` (borrowed until the operation ends) to server 0.
std::shared_ptr<kv::KvOperation> SubmitPush(kv::KvClient& client, int rank,
                                            const std::vector<float>& g) {
  auto op = std::make_shared<kv::KvOperation>("push far ahead", 30s);
  kv::ClientRequest r;
  r.server = 0;
  r.type = kv::kvmsg::kPush;
  r.key = kKey;
  r.meta = PushRequest(rank, static_cast<int>(g.size())).Encode();
  r.payload.push_back(std::as_bytes(std::span<const float>(g)));
  client.Submit(op, {r});
  return op;
}

// The bytes the server books for one such push.
uint64_t PushBytes(int n) {
  return net::kHeaderSize + PushRequest(0, n).Encode().size() + uint64_t(n) * sizeof(float);
}

void ExpectRoundValue(KVStore& kv, int rounds, int n) {
  Tensor w(DType::kF32, {n}, [](size_t) { return 0.0; });
  kv.Pull(static_cast<int>(kKey), w.view());
  for (int i = 0; i < n; ++i) ASSERT_EQ(w.at(size_t(i)), 3.0 * rounds + 2.0 * i) << "element " << i;
}

double Metric(base::StatsRegistry& stats, const std::string& name) {
  for (const auto& f : stats.Families()) {
    if (f.name != name || f.series.empty()) continue;
    const auto& s = f.series.front();
    return s.gauge ? s.gauge->value() : static_cast<double>(s.counter->value());
  }
  return -1;
}

// One server, two workers, the same bound in the workers' windows and on
// the server.
KvJobOptions OneServerTwoWorkers(uint64_t bound) {
  KvJobOptions o;
  o.servers = 1;
  o.workers = 2;
  o.inflight_bytes = bound;
  o.server_inflight_bytes = bound;
  return o;
}

// (bound in bytes, elements per push)
class FarAhead : public ::testing::TestWithParam<std::tuple<uint64_t, int>> {};

// Worker 0 submits every round at once while worker 1 starts late: its
// client sends only what fits the bound, the server never holds more than
// the bound for it, nothing is refused, and every round sums exactly.
TEST_P(FarAhead, CorrectWorkerIsHeldBackAndNeverRefused) {
  const uint64_t bound = std::get<0>(GetParam());
  const int n = std::get<1>(GetParam());
  // Enough rounds to be several bounds ahead.
  const int rounds = static_cast<int>(std::max<uint64_t>(8, 4 * bound / PushBytes(n) + 2));
  KvJob job(OneServerTwoWorkers(bound));
  base::StatsRegistry& server_stats = job.node(0).stats;
  std::unique_ptr<PeakSampler> sampler;
  std::promise<void> initialised;
  auto init_done = initialised.get_future().share();
  auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
    Tensor w(DType::kF32, {n}, [](size_t) { return 0.0; });
    kv.Init(static_cast<int>(kKey), w.view());  // every worker: it ends in a barrier
    if (rank == 0) {
      sampler = std::make_unique<PeakSampler>(
          [&server_stats] { return Metric(server_stats, "tandem_kv_server_inflight_bytes"); });
      initialised.set_value();
      std::vector<std::vector<float>> grads;
      for (int r = 0; r < rounds; ++r) grads.push_back(Gradient(0, r, n));
      std::vector<std::shared_ptr<kv::KvOperation>> ops;
      for (int r = 0; r < rounds; ++r)
        ops.push_back(SubmitPush(job.client(0), 0, grads[size_t(r)]));
      for (auto& op : ops) op->Wait();
    } else {
      ASSERT_EQ(init_done.wait_for(30s), std::future_status::ready);
      std::this_thread::sleep_for(300ms);  // worker 0 is far ahead by now
      for (int r = 0; r < rounds; ++r) {
        auto g = Gradient(1, r, n);
        SubmitPush(job.client(1), 1, g)->Wait();
      }
    }
    ExpectRoundValue(kv, rounds, n);
  });
  ExpectNoErrors(errors);
  ASSERT_NE(sampler, nullptr);
  const double peak = sampler->Stop();
  // Worker 0 sends while below the bound (so up to one push over it), plus
  // worker 1's single push; and worker 0, far ahead, did fill its window.
  EXPECT_LE(peak, static_cast<double>(bound + 2 * PushBytes(n)));
  EXPECT_GE(peak, static_cast<double>(bound));
  EXPECT_EQ(Metric(server_stats, "tandem_kv_server_refused_requests_total"), 0);
  EXPECT_EQ(Metric(server_stats, "tandem_kv_server_inflight_bytes"), 0);
}

// Polls `name` on `stats` until it equals `want` (at most 20 s).
void AwaitMetric(base::StatsRegistry& stats, const std::string& name, double want) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (Metric(stats, name) != want && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(Metric(stats, name), want) << name;
}

// Worker 0's client ignores the bound (a window far larger than the
// server's): the server books requests while it holds less than the bound
// and refuses the rest, each with an error naming the setting; the admitted
// rounds complete exactly once worker 1 pushes them. Round 0's push is
// merged (and leaves the books) before the others are sent; the later
// rounds wait for worker 1, held by the server.
TEST_P(FarAhead, WorkerIgnoringTheBoundHasItsExcessRefused) {
  const uint64_t bound = std::get<0>(GetParam());
  const int n = std::get<1>(GetParam());
  const uint64_t each = PushBytes(n);
  // Held while the held bytes are below the bound: ceil(bound / each), after
  // round 0.
  const int held = static_cast<int>((bound + each - 1) / each);
  const int admitted = 1 + held;
  constexpr int kExcess = 5;
  const int rounds = admitted + kExcess;
  KvJobOptions o;
  o.servers = 1;
  o.workers = 2;
  o.inflight_bytes = uint64_t{1} << 40;
  o.server_inflight_bytes = bound;
  KvJob job(o);
  base::StatsRegistry& server_stats = job.node(0).stats;
  std::promise<void> refusals_seen;
  auto go = refusals_seen.get_future().share();
  auto errors = job.Run("dist_sync", [&](KVStore& kv, int rank) {
    Tensor w(DType::kF32, {n}, [](size_t) { return 0.0; });
    kv.Init(static_cast<int>(kKey), w.view());  // every worker: it ends in a barrier
    if (rank == 0) {
      std::vector<std::vector<float>> grads;
      for (int r = 0; r < rounds; ++r) grads.push_back(Gradient(0, r, n));
      std::vector<std::shared_ptr<kv::KvOperation>> ops;
      ops.push_back(SubmitPush(job.client(0), 0, grads[0]));
      // Sent at once; its window lets go of it when the merge's receipt came.
      AwaitMetric(job.node(1).stats, "tandem_kv_window_bytes", 0);
      for (int r = 1; r < rounds; ++r)
        ops.push_back(SubmitPush(job.client(0), 0, grads[size_t(r)]));
      for (int r = admitted; r < rounds; ++r) {
        try {
          ops[size_t(r)]->Wait();
          ADD_FAILURE() << "round " << r << " was booked beyond the bound";
        } catch (const ProtocolError& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find("refused"), std::string::npos) << what;
          EXPECT_NE(what.find(std::to_string(bound) + " B (TANDEM_KV_INFLIGHT_BYTES)"),
                    std::string::npos)
              << what;
          EXPECT_NE(what.find(std::to_string(held * each) + " B of unanswered requests"),
                    std::string::npos)
              << what;
        }
      }
      EXPECT_EQ(Metric(server_stats, "tandem_kv_server_inflight_bytes"),
                static_cast<double>(held * each));
      refusals_seen.set_value();
      for (int r = 0; r < admitted; ++r) ops[size_t(r)]->Wait();
    } else {
      ASSERT_EQ(go.wait_for(30s), std::future_status::ready);
      for (int r = 0; r < admitted; ++r) {
        auto g = Gradient(1, r, n);
        SubmitPush(job.client(1), 1, g)->Wait();
      }
    }
    ExpectRoundValue(kv, admitted, n);
  });
  ExpectNoErrors(errors);
  EXPECT_EQ(Metric(server_stats, "tandem_kv_server_refused_requests_total"), kExcess);
  EXPECT_EQ(Metric(server_stats, "tandem_kv_server_inflight_bytes"), 0);
}

INSTANTIATE_TEST_SUITE_P(BoundsAndSizes, FarAhead,
                         ::testing::Values(std::make_tuple(uint64_t{64} << 10, 1024),
                                           std::make_tuple(uint64_t{256} << 10, 16384),
                                           std::make_tuple(uint64_t{1} << 20, 100000)),
                         [](const auto& info) {
                           return fmt::format("bound{}KiB_push{}floats",
                                              std::get<0>(info.param) >> 10,
                                              std::get<1>(info.param));
                         });

// How each worker sends one step's keys in OppositeOrders.
enum class StepShape { kPushPull, kPushThenPull };

// (shape, the workers' window in bytes)
class OppositeOrders : public ::testing::TestWithParam<std::tuple<StepShape, uint64_t>> {};

// Two workers send one step's keys in opposite orders (priorities) through
// windows that hold about one key (the least TANDEM_KV_INFLIGHT_BYTES, and
// three pushes): each worker's first key waits for the other's last. The server's receipts take
// merged pushes (and what a parked request's answer would bring) out of the windows, so every step
// completes with exact sums; counting requests until their round ends, as the window did before
// receipts, deadlocked here.
TEST_P(OppositeOrders, EveryStepCompletesWithExactSums) {
  const auto [shape, window] = GetParam();
  constexpr int kKeys = 6;
  constexpr int kSteps = 3;
  constexpr int kFloats = 16384;  // a push of a little more than the least window
  KvJob job(OneServerTwoWorkers(window));
  auto errors = job.Run("dist_sync", [&, shape = shape](KVStore& kv, int rank) {
    std::vector<Tensor> grads, outs;
    for (int k = 0; k < kKeys; ++k) {
      Tensor w(DType::kF32, {kFloats}, [](size_t) { return 0.0; });
      kv.Init(k, w.view());
      grads.emplace_back(DType::kF32, std::vector<int64_t>{kFloats});
      outs.emplace_back(DType::kF32, std::vector<int64_t>{kFloats});
    }
    // Worker 0 favours low keys, worker 1 high keys.
    const auto priority = [&](int k) { return rank == 0 ? kKeys - k : k; };
    for (int step = 0; step < kSteps; ++step) {
      std::vector<KVHandle> handles;
      for (int k = 0; k < kKeys; ++k) {
        // Worker w's gradient of key k at element i: (w+1)*(k+1)*(step+1) + i.
        Tensor& g = grads[size_t(k)];
        for (int i = 0; i < kFloats; ++i)
          SetAt(g.dtype, g.bytes.data(), size_t(i), (rank + 1) * (k + 1) * (step + 1) + i);
        if (shape == StepShape::kPushPull) {
          handles.push_back(kv.PushPullAsync(k, {grads[size_t(k)].view()}, {outs[size_t(k)].view()},
                                             priority(k)));
        } else {
          handles.push_back(kv.PushAsync(k, {grads[size_t(k)].view()}, priority(k)));
        }
      }
      if (shape == StepShape::kPushThenPull) {
        for (int k = 0; k < kKeys; ++k) {
          handles.push_back(kv.PullAsync(k, {outs[size_t(k)].view()}, priority(k)));
        }
      }
      for (auto& h : handles) h.Wait(20s);
      for (int k = 0; k < kKeys; ++k) {
        for (int i = 0; i < kFloats; ++i) {
          ASSERT_EQ(outs[size_t(k)].at(size_t(i)), 3.0 * (k + 1) * (step + 1) + 2.0 * i)
              << "rank " << rank << " step " << step << " key " << k << " element " << i;
        }
      }
    }
  });
  ExpectNoErrors(errors);
  EXPECT_EQ(Metric(job.node(0).stats, "tandem_kv_server_refused_requests_total"), 0);
}

INSTANTIATE_TEST_SUITE_P(
    ShapesAndWindows, OppositeOrders,
    ::testing::Combine(::testing::Values(StepShape::kPushPull, StepShape::kPushThenPull),
                       ::testing::Values(kv::kMinInflightBytes, 3 * PushBytes(16384))),
    [](const auto& info) {
      return fmt::format(
          "{}_window{}B",
          std::get<0>(info.param) == StepShape::kPushPull ? "pushpull" : "push_then_pull",
          std::get<1>(info.param));
    });

// The window's own rule, on its own: book below the bound, refuse at or
// over it, release per request, forget a connection.
TEST(RequestWindow, BooksRefusesReleasesAndForgets) {
  base::Gauge held;
  base::Counter refused;
  kv::RequestWindow w(100, &held, &refused);
  EXPECT_EQ(w.Admit(1, 10, 250), "");  // alone: larger than the bound is fine
  EXPECT_NE(w.Admit(1, 11, 1), "");
  EXPECT_EQ(w.Admit(2, 10, 60), "");  // another connection has its own books
  EXPECT_EQ(w.Admit(2, 11, 60), "");  // 60 < 100: booked, now 120
  const std::string why = w.Admit(2, 12, 5);
  EXPECT_NE(why.find("120 B of unanswered requests from this worker (2 requests)"),
            std::string::npos)
      << why;
  EXPECT_EQ(held.value(), 370);
  EXPECT_EQ(refused.value(), 2u);
  w.Release(2, 10);
  w.Release(2, 99);  // unknown: ignored
  EXPECT_EQ(w.held(2), 60u);
  EXPECT_EQ(w.Admit(2, 12, 5), "");
  w.Forget(1);
  EXPECT_EQ(w.held(1), 0u);
  EXPECT_EQ(held.value(), 65);
  w.Release(1, 10);  // after Forget: ignored
  EXPECT_EQ(held.value(), 65);
}

}  // namespace
}  // namespace tandem::testing
