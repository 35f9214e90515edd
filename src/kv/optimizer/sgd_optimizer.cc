// "sgd": MXNet 1.9's SGD, which on a kvstore (Updater with aggregation)
// runs the multi_sgd_update / multi_sgd_mom_update kernels (and their mp_
// forms), one weight at a time:
//
//   mom = momentum * mom - lr * wd * w - lr * clip(rescale_grad * grad, clip_gradient)
//   w   = w + mom
//
// with mom = 0 and no state when momentum is 0. Every hyper-parameter is a
// float32 kernel parameter. docs/optimizers.md, "sgd".
#include <fmt/format.h>

#include "kv/optimizer/optimizer_base.h"

namespace tandem::kv {
namespace {

class SgdOptimizer final : public OptimizerBase {
 public:
  explicit SgdOptimizer(OptimizerParamReader& params) : OptimizerBase("sgd", params, 0.01) {
    momentum_ = params.GetDouble("momentum", 0.0);
    // Only meaningful for row-sparse gradients, which Update does not take;
    // accepted so that MXNet's parameter set passes unchanged.
    params.GetBool("lazy_update", true);
    if (momentum_ < 0) params.Fail("momentum", fmt::format("is {}, must be >= 0", momentum_));
  }

  size_t NumStates() const override { return momentum_ != 0 ? 1 : 0; }

  void RunKernel(Precision precision, const KernelCall& call) override {
    DispatchPrecision(precision, [&]<typename T>(T) {
      DispatchBool(momentum_ != 0, [&]<typename HasMom>(HasMom) {
        DispatchBool(KernelClipsGradient(),
                     [&]<typename Clip>(Clip) { Run<T, HasMom::value, Clip::value>(call); });
      });
    });
  }

 private:
  template <typename T, bool kHasMomentum, bool kClip>
  void Run(const KernelCall& call) const {
    using W = typename T::Weight;
    using G = typename T::Grad;
    using S = typename T::State;
    using C = typename T::Compute;
    const C lr = static_cast<float>(call.lr);
    const C wd = static_cast<float>(common().wd);
    const C rescale = static_cast<float>(common().rescale_grad);
    const C clip = static_cast<float>(common().clip_gradient.value_or(-1.0));
    const C momentum = kHasMomentum ? static_cast<float>(momentum_) : 0.0f;
    auto* weight = static_cast<W*>(call.weight);
    const auto* grad = static_cast<const G*>(call.grad);
    auto* mom = static_cast<S*>(call.states[0]);
    for (size_t i = 0; i < call.count; ++i) {
      C w = Load<C>(weight[i]);
      C m = kHasMomentum ? Load<C>(mom[i]) : C(0);
      const C g = Load<C>(grad[i]);
      if constexpr (kClip) {
        m = momentum * m - lr * wd * w - lr * ClipTo(rescale * g, clip);
      } else {
        m = momentum * m - lr * wd * w - lr * rescale * g;
      }
      if constexpr (kHasMomentum) mom[i] = Store<S>(m);
      w = w + m;
      weight[i] = Store<W>(w);
    }
  }

  double momentum_ = 0;
};

}  // namespace

std::unique_ptr<Optimizer> MakeSgdOptimizer(OptimizerParamReader& params) {
  return std::make_unique<SgdOptimizer>(params);
}

}  // namespace tandem::kv
