// "rmsprop": MXNet 1.9's RMSProp, the rmsprop_update kernel (Tieleman &
// Hinton) or, with centered=true, rmspropalex_update (Graves):
//
//   g = clip(rescale_grad * grad + wd * w, clip_gradient)
//   plain:     n = (1 - gamma1) * g * g + gamma1 * n
//              w = w - lr * (g / sqrt(n + epsilon))
//   centered:  n     = (1 - gamma1) * g * g + gamma1 * n
//              gbar  = (1 - gamma1) * g + gamma1 * gbar
//              delta = gamma2 * delta - lr * g / sqrt(n - gbar * gbar + epsilon)
//              w     = w + delta
//   then w = clip(w, clip_weights) when clip_weights is given.
//
// docs/optimizers.md, "rmsprop".
#include <cmath>

#include "kv/optimizer/optimizer_base.h"

namespace tandem::kv {
namespace {

class RmsPropOptimizer final : public OptimizerBase {
 public:
  explicit RmsPropOptimizer(OptimizerParamReader& params)
      : OptimizerBase("rmsprop", params, 0.001) {
    gamma1_ = params.GetDoubleIn("gamma1", 0.9, OptimizerParamReader::kFraction);
    gamma2_ = params.GetDoubleIn("gamma2", 0.9, OptimizerParamReader::kFraction);
    epsilon_ = params.GetDoubleIn("epsilon", 1e-8, OptimizerParamReader::kNonNegative);
    centered_ = params.GetBool("centered", false);
    clip_weights_ = params.GetOptionalDouble("clip_weights");
  }

  size_t NumStates() const override { return centered_ ? 3 : 1; }

  void RunKernel(Precision precision, const KernelCall& call) override {
    // As clip_gradient: passed when truthy, applied when >= 0 as a float.
    const bool clip_weights = clip_weights_.has_value() && *clip_weights_ != 0.0 &&
                              static_cast<float>(*clip_weights_) >= 0.0f;
    DispatchPrecision(precision, [&]<typename T>(T) {
      DispatchBool(KernelClipsGradient(), [&]<typename Clip>(Clip) {
        DispatchBool(clip_weights, [&]<typename ClipW>(ClipW) {
          if (centered_) {
            RunCentered<T, Clip::value, ClipW::value>(call);
          } else {
            RunPlain<T, Clip::value, ClipW::value>(call);
          }
        });
      });
    });
  }

 private:
  template <typename C>
  struct Constants {
    C lr, wd, rescale, clip, clip_weights, gamma1, gamma2, epsilon;
  };

  template <typename C>
  Constants<C> MakeConstants(const KernelCall& call) const {
    return Constants<C>{static_cast<float>(call.lr),
                        static_cast<float>(common().wd),
                        static_cast<float>(common().rescale_grad),
                        static_cast<float>(common().clip_gradient.value_or(-1.0)),
                        static_cast<float>(clip_weights_.value_or(-1.0)),
                        static_cast<float>(gamma1_),
                        static_cast<float>(gamma2_),
                        static_cast<float>(epsilon_)};
  }

  template <typename T, bool kClip, bool kClipWeights>
  void RunPlain(const KernelCall& call) const {
    const auto k = MakeConstants<typename T::Compute>(call);
    auto* weight = static_cast<typename T::Weight*>(call.weight);
    const auto* grad = static_cast<const typename T::Grad*>(call.grad);
    auto* state_n = static_cast<typename T::State*>(call.states[0]);
    ForEachBlock(call.count, [&](size_t first, auto count) {
      PlainBlock<T, kClip, kClipWeights>(weight + first, grad + first, state_n + first, count, k);
    });
  }

  template <typename T, bool kClip, bool kClipWeights, typename Count>
  static void PlainBlock(typename T::Weight* __restrict weight,
                         const typename T::Grad* __restrict grad,
                         typename T::State* __restrict state_n, Count count,
                         const Constants<typename T::Compute>& k) {
    using C = typename T::Compute;
    using S = typename T::State;
    for (size_t i = 0; i < count; ++i) {
      const C w = Load<C>(weight[i]);
      C g = k.rescale * Load<C>(grad[i]) + k.wd * w;
      if constexpr (kClip) g = ClipTo(g, k.clip);
      const C n = RoundTrip<S>((C(1) - k.gamma1) * (g * g) + k.gamma1 * Load<C>(state_n[i]));
      state_n[i] = Store<S>(n);
      C updated = w - k.lr * (g / std::sqrt(n + k.epsilon));
      if constexpr (kClipWeights) updated = ClipTo(updated, k.clip_weights);
      weight[i] = Store<typename T::Weight>(updated);
    }
  }

  template <typename T, bool kClip, bool kClipWeights>
  void RunCentered(const KernelCall& call) const {
    const auto k = MakeConstants<typename T::Compute>(call);
    auto* weight = static_cast<typename T::Weight*>(call.weight);
    const auto* grad = static_cast<const typename T::Grad*>(call.grad);
    auto* state_n = static_cast<typename T::State*>(call.states[0]);
    auto* state_g = static_cast<typename T::State*>(call.states[1]);
    auto* delta = static_cast<typename T::State*>(call.states[2]);
    ForEachBlock(call.count, [&](size_t first, auto count) {
      CenteredBlock<T, kClip, kClipWeights>(weight + first, grad + first, state_n + first,
                                            state_g + first, delta + first, count, k);
    });
  }

  template <typename T, bool kClip, bool kClipWeights, typename Count>
  static void CenteredBlock(typename T::Weight* __restrict weight,
                            const typename T::Grad* __restrict grad,
                            typename T::State* __restrict state_n,
                            typename T::State* __restrict state_g,
                            typename T::State* __restrict delta, Count count,
                            const Constants<typename T::Compute>& k) {
    using C = typename T::Compute;
    using S = typename T::State;
    for (size_t i = 0; i < count; ++i) {
      const C w = Load<C>(weight[i]);
      C g = k.rescale * Load<C>(grad[i]) + k.wd * w;
      if constexpr (kClip) g = ClipTo(g, k.clip);
      const C n = RoundTrip<S>((C(1) - k.gamma1) * g * g + k.gamma1 * Load<C>(state_n[i]));
      const C gbar = RoundTrip<S>((C(1) - k.gamma1) * g + k.gamma1 * Load<C>(state_g[i]));
      const C d = RoundTrip<S>(k.gamma2 * Load<C>(delta[i]) -
                               k.lr * g / std::sqrt(n - gbar * gbar + k.epsilon));
      state_n[i] = Store<S>(n);
      state_g[i] = Store<S>(gbar);
      delta[i] = Store<S>(d);
      C updated = w + d;
      if constexpr (kClipWeights) updated = ClipTo(updated, k.clip_weights);
      weight[i] = Store<typename T::Weight>(updated);
    }
  }

  double gamma1_ = 0.9;
  double gamma2_ = 0.9;
  double epsilon_ = 1e-8;
  bool centered_ = false;
  std::optional<double> clip_weights_;
};

}  // namespace

std::unique_ptr<Optimizer> MakeRmsPropOptimizer(OptimizerParamReader& params) {
  return std::make_unique<RmsPropOptimizer>(params);
}

}  // namespace tandem::kv
