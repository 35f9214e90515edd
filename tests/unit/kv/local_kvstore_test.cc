// The single-process stores: sums over local devices (several threads above
// the big-array bound), the updater on the worker, and bad input.
#include "kv/local_kvstore.h"

#include <gtest/gtest.h>

#include <tuple>

#include "kv_job.h"
#include "typed_values.h"

namespace tandem::testing {
namespace {

// (devices, elements, dtype, reduction threads); the bound is 1000.
class LocalStore : public ::testing::TestWithParam<std::tuple<int, int, DType, int>> {};

TEST_P(LocalStore, SumsDevicesExactly) {
  // Named copies: clang 14 cannot capture structured bindings in lambdas.
  const auto devices = std::get<0>(GetParam());
  const auto n = std::get<1>(GetParam());
  const auto dtype = std::get<2>(GetParam());
  const auto threads = std::get<3>(GetParam());
  kv::StoreSettings s;
  s.big_array_bound = 1000;
  s.reduction_threads = threads;
  kv::LocalKVStore kv("local", s, TestSgdFactory());
  Tensor w(dtype, {n}, [](size_t i) { return double(i % 100); });
  kv.Init("w", w.view());
  std::vector<Tensor> grads;
  std::vector<TensorView> views;
  for (int d = 0; d < devices; ++d) {
    grads.emplace_back(dtype, std::vector<int64_t>{n},
                       [&](size_t i) { return double(d + 1) * double(i % 9); });
  }
  for (auto& g : grads) views.push_back(g.view());
  kv.Push("w", views);
  std::vector<Tensor> outs;
  for (int d = 0; d < 2; ++d) outs.emplace_back(dtype, std::vector<int64_t>{n});
  kv.Pull("w", {outs[0].view(), outs[1].view()});
  const double tri = devices * (devices + 1) / 2.0;
  for (size_t i = 0; i < outs[0].size(); ++i) {
    ASSERT_EQ(outs[0].at(i), tri * double(i % 9)) << i;
    ASSERT_EQ(outs[1].at(i), tri * double(i % 9)) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LocalStore,
    ::testing::Values(std::tuple{1, 10, DType::kF32, 1}, std::tuple{4, 999, DType::kF32, 4},
                      std::tuple{4, 200000, DType::kF32, 4}, std::tuple{3, 150001, DType::kF16, 3},
                      std::tuple{2, 5000, DType::kI64, 2}, std::tuple{8, 100000, DType::kF64, 4}));

TEST(LocalStore, UpdaterRunsOnTheWorkerAndStatesSave) {
  kv::LocalKVStore kv("device", {}, TestSgdFactory());
  Tensor w(DType::kF32, {4}, [](size_t i) { return double(i); });
  kv.Init(0, w.view());
  EXPECT_THROW(kv.SaveOptimizerStates(::testing::TempDir() + "/none"), InvalidArgument);
  kv.SetOptimizer("sgd", {{"learning_rate", "0.5"}});
  Tensor g(DType::kF32, {4}, [](size_t) { return 2.0; });
  Tensor g2(DType::kF32, {4}, [](size_t) { return 1.0; });
  kv.Push(0, {g.view(), g2.view()});
  kv.Pull(0, w.view());
  for (size_t i = 0; i < 4; ++i) ASSERT_EQ(w.at(i), double(i) - 1.5);
  const std::string path = ::testing::TempDir() + "/local_states";
  kv.SaveOptimizerStates(path);
  kv.LoadOptimizerStates(path);
  EXPECT_THROW(kv.SetOptimizer("nope", {}), InvalidArgument);
  EXPECT_THROW(kv.SetGradientCompression({{"type", "2bit"}}), InvalidArgument);
}

TEST(LocalStore, BadInputLeavesTheValue) {
  kv::LocalKVStore kv("local", {}, nullptr);
  EXPECT_THROW(kv::LocalKVStore("dist_sync", {}, nullptr), InvalidArgument);
  Tensor w(DType::kF32, {2, 3}, [](size_t i) { return double(i); });
  kv.Init(1, w.view());
  Tensor wrong(DType::kF32, {3, 2});
  Tensor wrong_type(DType::kI32, {2, 3});
  EXPECT_THROW(kv.Push(1, wrong.view()), InvalidArgument);
  EXPECT_THROW(kv.Push(1, {w.view(), wrong_type.view()}), InvalidArgument);
  EXPECT_THROW(kv.Pull(1, wrong.view()), InvalidArgument);
  EXPECT_THROW(kv.Push(2, w.view()), InvalidArgument);
  EXPECT_THROW(kv.Init(1, w.view()), InvalidArgument);
  EXPECT_THROW(kv.Init("x", w.view()), InvalidArgument);
  Tensor rows(DType::kF32, {1, 3});
  EXPECT_THROW(kv.RowSparsePull(1, rows.view(), {2}), InvalidArgument);
  kv.RowSparsePull(1, rows.view(), {1});
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(rows.at(i), double(3 + i));
  Tensor out(DType::kF32, {2, 3});
  kv.Pull(1, out.view());
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(out.at(i), double(i));
  kv.Push(1, w.view());  // without an updater the value becomes the push
  kv.Push(1, {w.view(), w.view()});
  kv.Pull(1, out.view());
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(out.at(i), 2.0 * double(i));
}

}  // namespace
}  // namespace tandem::testing
