// "nag": MXNet 1.9's NAG (Nesterov momentum), the nag_mom_update kernel
// (mp_nag_mom_update under multi-precision):
//
//   g   = clip(rescale_grad * grad, clip_gradient)
//   mom = momentum * mom
//   w'  = w - mom + (momentum + 1) * (mom - lr * (g + wd * w))
//   mom = mom - lr * (g + wd * w')
//
// The second line of the momentum update reads the weight *after* its
// update: MXNet's kernel writes the output in place over the weight before
// it reads the weight again (and the mp_ kernel uses its updated local), so
// this is what MXNet computes. With momentum 0 it is sgd_update:
//
//   w = (1 - lr * wd) * w - lr * clip(rescale_grad * grad, clip_gradient)
//
// docs/optimizers.md, "nag".
#include <fmt/format.h>

#include "kv/optimizer/optimizer_base.h"

namespace tandem::kv {
namespace {

class NagOptimizer final : public OptimizerBase {
 public:
  explicit NagOptimizer(OptimizerParamReader& params) : OptimizerBase("nag", params, 0.01) {
    momentum_ = params.GetDouble("momentum", 0.0);
    if (momentum_ < 0) params.Fail("momentum", fmt::format("is {}, must be >= 0", momentum_));
  }

  size_t NumStates() const override { return momentum_ != 0 ? 1 : 0; }

  void RunKernel(Precision precision, const KernelCall& call) override {
    DispatchPrecision(precision, [&]<typename T>(T) {
      DispatchBool(KernelClipsGradient(), [&]<typename Clip>(Clip) {
        if (momentum_ != 0) {
          RunMomentum<T, Clip::value>(call);
        } else {
          RunPlain<T, Clip::value>(call);
        }
      });
    });
  }

 private:
  template <typename T, bool kClip>
  void RunMomentum(const KernelCall& call) const {
    using W = typename T::Weight;
    using G = typename T::Grad;
    using S = typename T::State;
    using C = typename T::Compute;
    const C lr = static_cast<float>(call.lr);
    const C wd = static_cast<float>(common().wd);
    const C rescale = static_cast<float>(common().rescale_grad);
    const C clip = static_cast<float>(common().clip_gradient.value_or(-1.0));
    const C momentum = static_cast<float>(momentum_);
    auto* weight = static_cast<W*>(call.weight);
    const auto* grad = static_cast<const G*>(call.grad);
    auto* mom = static_cast<S*>(call.states[0]);
    for (size_t i = 0; i < call.count; ++i) {
      const C w = Load<C>(weight[i]);
      const C m = RoundTrip<S>(momentum * Load<C>(mom[i]));
      C g = rescale * Load<C>(grad[i]);
      if constexpr (kClip) g = ClipTo(g, clip);
      const W stored = Store<W>(w - m + (momentum + 1) * (m - lr * (g + wd * w)));
      weight[i] = stored;
      mom[i] = Store<S>(m - lr * (g + wd * Load<C>(stored)));
    }
  }

  template <typename T, bool kClip>
  void RunPlain(const KernelCall& call) const {
    using W = typename T::Weight;
    using G = typename T::Grad;
    using C = typename T::Compute;
    const C lr = static_cast<float>(call.lr);
    const C wd = static_cast<float>(common().wd);
    const C rescale = static_cast<float>(common().rescale_grad);
    const C clip = static_cast<float>(common().clip_gradient.value_or(-1.0));
    auto* weight = static_cast<W*>(call.weight);
    const auto* grad = static_cast<const G*>(call.grad);
    for (size_t i = 0; i < call.count; ++i) {
      const C w = Load<C>(weight[i]);
      const C g = Load<C>(grad[i]);
      if constexpr (kClip) {
        weight[i] = Store<W>((C(1) - lr * wd) * w - lr * ClipTo(rescale * g, clip));
      } else {
        weight[i] = Store<W>((C(1) - lr * wd) * w - (lr * rescale) * g);
      }
    }
  }

  double momentum_ = 0;
};

}  // namespace

std::unique_ptr<Optimizer> MakeNagOptimizer(OptimizerParamReader& params) {
  return std::make_unique<NagOptimizer>(params);
}

}  // namespace tandem::kv
