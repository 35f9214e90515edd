// "adagrad": MXNet 1.9's AdaGrad. Its dense update is written in Python
// with NDArray operations, each rounding to the weight's type, and scalars
// converted from Python's double to that type:
//
//   g        = grad * rescale_grad
//   g        = clip(g, -clip_gradient, clip_gradient)   (whenever clip_gradient is given)
//   history += g * g
//   div      = g / sqrt(history + eps)
//   w       += (div + w * wd) * -lr
//
// Note eps inside the square root, and that a clip_gradient of 0 zeroes the
// gradient (MXNet tests `is not None` here). docs/optimizers.md, "adagrad".
#include <cmath>

#include "kv/optimizer/optimizer_base.h"

namespace tandem::kv {
namespace {

class AdaGradOptimizer final : public OptimizerBase {
 public:
  explicit AdaGradOptimizer(OptimizerParamReader& params) : OptimizerBase("adagrad", params, 0.01) {
    eps_ = params.GetDouble("eps", 1e-7);
  }

  size_t NumStates() const override { return 1; }

  void RunKernel(Precision precision, const KernelCall& call) override {
    DispatchPrecision(precision, [&]<typename T>(T) {
      DispatchBool(common().clip_gradient.has_value(),
                   [&]<typename Clip>(Clip) { Run<T, Clip::value>(call); });
    });
  }

 private:
  template <typename T, bool kClip>
  void Run(const KernelCall& call) const {
    using W = typename T::Weight;
    using G = typename T::Grad;
    using S = typename T::State;
    using C = typename T::Compute;
    const C rescale = static_cast<C>(common().rescale_grad);
    const C wd = static_cast<C>(common().wd);
    const C minus_lr = static_cast<C>(-call.lr);
    const C eps = static_cast<C>(eps_);
    // clip's a_min/a_max are float32 operator parameters.
    const C clip = static_cast<float>(common().clip_gradient.value_or(0.0));
    auto* weight = static_cast<W*>(call.weight);
    const auto* grad = static_cast<const G*>(call.grad);
    auto* history = static_cast<S*>(call.states[0]);
    for (size_t i = 0; i < call.count; ++i) {
      const C w = Load<C>(weight[i]);
      C g = Load<C>(grad[i]) * rescale;
      if constexpr (kClip) g = g > clip ? clip : (g < -clip ? -clip : g);
      const C h = RoundTrip<S>(Load<C>(history[i]) + g * g);
      history[i] = Store<S>(h);
      const C div = g / std::sqrt(h + eps);
      weight[i] = Store<W>(w + (div + w * wd) * minus_lr);
    }
  }

  double eps_ = 1e-7;
};

}  // namespace

std::unique_ptr<Optimizer> MakeAdaGradOptimizer(OptimizerParamReader& params) {
  return std::make_unique<AdaGradOptimizer>(params);
}

}  // namespace tandem::kv
