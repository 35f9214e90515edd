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
#include "kv/optimizer/sgd_update_rule.h"

namespace tandem::kv {
namespace {

class SgdOptimizer final : public OptimizerBase {
 public:
  explicit SgdOptimizer(OptimizerParamReader& params) : OptimizerBase("sgd", params, 0.01) {
    momentum_ = params.GetDoubleIn("momentum", 0.0, OptimizerParamReader::kFraction);
    lazy_update_ = params.GetBool("lazy_update", true);
  }

  size_t NumStates() const override { return momentum_ != 0 ? 1 : 0; }

  // MXNet's mp_sgd kernels have no row-sparse form (MXNet densifies), so
  // only keys without a master copy update lazily.
  bool LazyRows(bool has_master) const override { return lazy_update_ && !has_master; }

  // Lazy rows: sgd_mom_update's row kernel computes what multi_sgd does;
  // without momentum MXNet calls sgd_update.
  void RunRowKernel(Precision precision, const KernelCall& call) override {
    if (momentum_ != 0) {
      RunKernel(precision, call);
    } else {
      RunSgdUpdateRule(precision, call, common(), KernelClipsGradient());
    }
  }

  void RunKernel(Precision precision, const KernelCall& call) override {
    DispatchPrecision(precision, [&]<typename T>(T) {
      DispatchBool(momentum_ != 0, [&]<typename HasMom>(HasMom) {
        DispatchBool(KernelClipsGradient(),
                     [&]<typename Clip>(Clip) { Run<T, HasMom::value, Clip::value>(call); });
      });
    });
  }

 private:
  template <typename C>
  struct Constants {
    C lr, wd, rescale, clip, momentum;
  };

  template <typename T, bool kHasMomentum, bool kClip>
  void Run(const KernelCall& call) const {
    using C = typename T::Compute;
    const Constants<C> k{static_cast<float>(call.lr), static_cast<float>(common().wd),
                         static_cast<float>(common().rescale_grad),
                         static_cast<float>(common().clip_gradient.value_or(-1.0)),
                         kHasMomentum ? static_cast<float>(momentum_) : 0.0f};
    auto* weight = static_cast<typename T::Weight*>(call.weight);
    const auto* grad = static_cast<const typename T::Grad*>(call.grad);
    auto* mom = static_cast<typename T::State*>(call.states[0]);
    ForEachBlock(call.count, [&](size_t first, auto count) {
      Block<T, kHasMomentum, kClip>(weight + first, grad + first, kHasMomentum ? mom + first : mom,
                                    count, k);
    });
  }

  template <typename T, bool kHasMomentum, bool kClip, typename Count>
  static void Block(typename T::Weight* __restrict weight, const typename T::Grad* __restrict grad,
                    typename T::State* __restrict mom, Count count,
                    const Constants<typename T::Compute>& k) {
    using C = typename T::Compute;
    for (size_t i = 0; i < count; ++i) {
      const C w = Load<C>(weight[i]);
      C m = kHasMomentum ? Load<C>(mom[i]) : C(0);
      const C g = Load<C>(grad[i]);
      if constexpr (kClip) {
        m = k.momentum * m - k.lr * k.wd * w - k.lr * ClipTo(k.rescale * g, k.clip);
      } else {
        m = k.momentum * m - k.lr * k.wd * w - k.lr * k.rescale * g;
      }
      if constexpr (kHasMomentum) mom[i] = Store<typename T::State>(m);
      weight[i] = Store<typename T::Weight>(w + m);
    }
  }

  double momentum_ = 0;
  bool lazy_update_ = true;
};

}  // namespace

std::unique_ptr<Optimizer> MakeSgdOptimizer(OptimizerParamReader& params) {
  return std::make_unique<SgdOptimizer>(params);
}

}  // namespace tandem::kv
