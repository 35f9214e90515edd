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
#include "kv/optimizer/sgd_update_rule.h"

namespace tandem::kv {
namespace {

class NagOptimizer final : public OptimizerBase {
 public:
  explicit NagOptimizer(OptimizerParamReader& params) : OptimizerBase("nag", params, 0.01) {
    momentum_ = params.GetDoubleIn("momentum", 0.0, OptimizerParamReader::kFraction);
  }

  size_t NumStates() const override { return momentum_ != 0 ? 1 : 0; }

  void RunKernel(Precision precision, const KernelCall& call) override {
    if (momentum_ == 0) {
      RunSgdUpdateRule(precision, call, common(), KernelClipsGradient());
      return;
    }
    DispatchPrecision(precision, [&]<typename T>(T) {
      DispatchBool(KernelClipsGradient(),
                   [&]<typename Clip>(Clip) { RunMomentum<T, Clip::value>(call); });
    });
  }

 private:
  template <typename C>
  struct Constants {
    C lr, wd, rescale, clip, momentum;
  };

  template <typename C>
  Constants<C> MakeConstants(const KernelCall& call) const {
    return Constants<C>{static_cast<float>(call.lr), static_cast<float>(common().wd),
                        static_cast<float>(common().rescale_grad),
                        static_cast<float>(common().clip_gradient.value_or(-1.0)),
                        static_cast<float>(momentum_)};
  }

  template <typename T, bool kClip>
  void RunMomentum(const KernelCall& call) const {
    const auto k = MakeConstants<typename T::Compute>(call);
    auto* weight = static_cast<typename T::Weight*>(call.weight);
    const auto* grad = static_cast<const typename T::Grad*>(call.grad);
    auto* mom = static_cast<typename T::State*>(call.states[0]);
    ForEachBlock(call.count, [&](size_t first, auto count) {
      MomentumBlock<T, kClip>(weight + first, grad + first, mom + first, count, k);
    });
  }

  template <typename T, bool kClip, typename Count>
  static void MomentumBlock(typename T::Weight* __restrict weight,
                            const typename T::Grad* __restrict grad,
                            typename T::State* __restrict mom, Count count,
                            const Constants<typename T::Compute>& k) {
    using C = typename T::Compute;
    using W = typename T::Weight;
    using S = typename T::State;
    for (size_t i = 0; i < count; ++i) {
      const C w = Load<C>(weight[i]);
      const C m = RoundTrip<S>(k.momentum * Load<C>(mom[i]));
      C g = k.rescale * Load<C>(grad[i]);
      if constexpr (kClip) g = ClipTo(g, k.clip);
      const W stored = Store<W>(w - m + (k.momentum + 1) * (m - k.lr * (g + k.wd * w)));
      weight[i] = stored;
      mom[i] = Store<S>(m - k.lr * (g + k.wd * Load<C>(stored)));
    }
  }

  double momentum_ = 0;
};

}  // namespace

std::unique_ptr<Optimizer> MakeNagOptimizer(OptimizerParamReader& params) {
  return std::make_unique<NagOptimizer>(params);
}

}  // namespace tandem::kv
