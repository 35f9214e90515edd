// The server's optimizer holder: a SetOptimizer that the server refuses (a
// value outside its range, an unknown optimizer) changes nothing, neither
// the optimizer nor any key's state. Workers check the same ranges before
// sending (docs/optimizers.md, "Ranges"); this is the server's own line.
#include "kv/server_optimizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tandem/error.h"

namespace tandem::kv {
namespace {

struct RefusedSet {
  std::string optimizer;
  OptimizerParams params;
  std::string message;  // the whole error
};

void PrintTo(const RefusedSet& c, std::ostream* os) {
  *os << c.optimizer;
  for (const auto& p : c.params) *os << " " << p.first << "=" << p.second;
}

class ServerOptimizerRefusal : public ::testing::TestWithParam<RefusedSet> {};

// SGD with momentum 0.5 and rate 0.5 on w = 1, g = 1 (MXNet's rule:
// mom = momentum * mom - lr * g; w += mom): after step 1 w = 0.5, mom = -0.5;
// after step 2 mom = -0.75, w = -0.25, which needs step 1's state.
TEST_P(ServerOptimizerRefusal, KeepsTheOptimizerAndItsStates) {
  const RefusedSet& c = GetParam();
  ServerOptimizer server(Optimizer::Create);
  server.Set("sgd", {{"learning_rate", "0.5"}, {"momentum", "0.5"}});
  float w = 1;
  float g = 1;
  const TensorView weight{&w, DType::kF32, {1}};
  const TensorView grad{&g, DType::kF32, {1}};
  server.Update(3, weight, grad);
  ASSERT_EQ(w, 0.5f);
  const std::string states = server.Snapshot()->second;

  try {
    server.Set(c.optimizer, c.params);
    ADD_FAILURE() << "the server took it";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), c.message);
  }
  ASSERT_TRUE(server.active());
  EXPECT_EQ(server.Snapshot()->first, "sgd");
  EXPECT_EQ(server.Snapshot()->second, states);
  server.Update(3, weight, grad);
  EXPECT_EQ(w, -0.25f);
}

INSTANTIATE_TEST_SUITE_P(
    All, ServerOptimizerRefusal,
    ::testing::Values(
        RefusedSet{"sgd",
                   {{"momentum", "5"}},
                   "optimizer 'sgd': parameter 'momentum' is 5, must be in [0, 1)"},
        RefusedSet{"adam",
                   {{"learning_rate", "1e39"}},
                   "optimizer 'adam': parameter 'learning_rate' is 1e+39, beyond float32's range "
                   "(the update kernels compute in float32)"},
        RefusedSet{"sgd",
                   {{"wd", "-1"}},
                   "optimizer 'sgd': parameter 'wd' is -1, must be in [0, 3.4028235e+38]"},
        RefusedSet{"rmsprop",
                   {{"rescale_grad", "0"}},
                   "optimizer 'rmsprop': parameter 'rescale_grad' is 0, must be in (0, "
                   "3.4028235e+38]"}));

}  // namespace
}  // namespace tandem::kv
