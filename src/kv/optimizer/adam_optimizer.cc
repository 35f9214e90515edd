// "adam": MXNet 1.9's Adam, the adam_update kernel with the bias correction
// folded into the learning rate in double, as Python does:
//
//   lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)        (t: the key's update count)
//   g    = clip(rescale_grad * grad + wd * w, clip_gradient)
//   m    = beta1 * m + (1 - beta1) * g
//   v    = beta2 * v + (1 - beta2) * g * g
//   w    = w - lr_t * m / (sqrt(v) + epsilon)
//
// docs/optimizers.md, "adam".
#include <fmt/format.h>

#include <cmath>

#include "kv/optimizer/optimizer_base.h"

namespace tandem::kv {
namespace {

class AdamOptimizer final : public OptimizerBase {
 public:
  explicit AdamOptimizer(OptimizerParamReader& params) : OptimizerBase("adam", params, 0.001) {
    beta1_ = params.GetDouble("beta1", 0.9);
    beta2_ = params.GetDouble("beta2", 0.999);
    epsilon_ = params.GetDouble("epsilon", 1e-8);
    params.GetBool("lazy_update", true);  // row-sparse only; see sgd_optimizer.cc
    if (beta1_ < 0 || beta1_ >= 1)
      params.Fail("beta1", fmt::format("is {}, must be in [0, 1)", beta1_));
    if (beta2_ < 0 || beta2_ >= 1)
      params.Fail("beta2", fmt::format("is {}, must be in [0, 1)", beta2_));
  }

  size_t NumStates() const override { return 2; }

  void RunKernel(Precision precision, const KernelCall& call) override {
    DispatchPrecision(precision, [&]<typename T>(T) {
      DispatchBool(KernelClipsGradient(), [&]<typename Clip>(Clip) { Run<T, Clip::value>(call); });
    });
  }

 private:
  template <typename T, bool kClip>
  void Run(const KernelCall& call) const {
    using W = typename T::Weight;
    using G = typename T::Grad;
    using S = typename T::State;
    using C = typename T::Compute;
    const double t = static_cast<double>(call.t);
    const double coef1 = 1.0 - std::pow(beta1_, t);
    const double coef2 = 1.0 - std::pow(beta2_, t);
    const C lr = static_cast<float>(call.lr * (std::sqrt(coef2) / coef1));
    const C wd = static_cast<float>(common().wd);
    const C rescale = static_cast<float>(common().rescale_grad);
    const C clip = static_cast<float>(common().clip_gradient.value_or(-1.0));
    const C beta1 = static_cast<float>(beta1_);
    const C beta2 = static_cast<float>(beta2_);
    const C epsilon = static_cast<float>(epsilon_);
    auto* weight = static_cast<W*>(call.weight);
    const auto* grad = static_cast<const G*>(call.grad);
    auto* mean = static_cast<S*>(call.states[0]);
    auto* var = static_cast<S*>(call.states[1]);
    for (size_t i = 0; i < call.count; ++i) {
      const C w = Load<C>(weight[i]);
      C g = Load<C>(grad[i]) * rescale + w * wd;
      if constexpr (kClip) g = ClipTo(g, clip);
      const C m = RoundTrip<S>(beta1 * Load<C>(mean[i]) + (C(1) - beta1) * g);
      const C v = RoundTrip<S>(beta2 * Load<C>(var[i]) + (C(1) - beta2) * g * g);
      mean[i] = Store<S>(m);
      var[i] = Store<S>(v);
      weight[i] = Store<W>(w - lr * m / (std::sqrt(v) + epsilon));
    }
  }

  double beta1_ = 0.9;
  double beta2_ = 0.999;
  double epsilon_ = 1e-8;
};

}  // namespace

std::unique_ptr<Optimizer> MakeAdamOptimizer(OptimizerParamReader& params) {
  return std::make_unique<AdamOptimizer>(params);
}

}  // namespace tandem::kv
