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
    beta1_ = params.GetDoubleIn("beta1", 0.9, OptimizerParamReader::kFraction);
    beta2_ = params.GetDoubleIn("beta2", 0.999, OptimizerParamReader::kFraction);
    epsilon_ = params.GetDoubleIn("epsilon", 1e-8, OptimizerParamReader::kNonNegative);
    lazy_update_ = params.GetBool("lazy_update", true);
  }

  size_t NumStates() const override { return 2; }

  void RunKernel(Precision precision, const KernelCall& call) override {
    DispatchPrecision(precision, [&]<typename T>(T) {
      DispatchBool(KernelClipsGradient(),
                   [&]<typename Clip>(Clip) { Run<T, Clip::value, false>(call); });
    });
  }

  // MXNet casts a row-sparse gradient for the master copy and calls
  // adam_update, which is lazy with or without multi-precision.
  bool LazyRows(bool) const override { return lazy_update_; }

  // adam_update's row kernel: as the dense one, except that with clipping
  // it squares the clipped gradient first: (1 - beta2) * (g * g).
  void RunRowKernel(Precision precision, const KernelCall& call) override {
    DispatchPrecision(precision, [&]<typename T>(T) {
      DispatchBool(KernelClipsGradient(),
                   [&]<typename Clip>(Clip) { Run<T, Clip::value, Clip::value>(call); });
    });
  }

 private:
  template <typename C>
  struct Constants {
    C lr, wd, rescale, clip, beta1, beta2, epsilon;
  };

  template <typename T, bool kClip, bool kSquareFirst>
  void Run(const KernelCall& call) const {
    using C = typename T::Compute;
    const double t = static_cast<double>(call.t);
    const double coef1 = 1.0 - std::pow(beta1_, t);
    const double coef2 = 1.0 - std::pow(beta2_, t);
    const Constants<C> k{static_cast<float>(call.lr * (std::sqrt(coef2) / coef1)),
                         static_cast<float>(common().wd),
                         static_cast<float>(common().rescale_grad),
                         static_cast<float>(common().clip_gradient.value_or(-1.0)),
                         static_cast<float>(beta1_),
                         static_cast<float>(beta2_),
                         static_cast<float>(epsilon_)};
    auto* weight = static_cast<typename T::Weight*>(call.weight);
    const auto* grad = static_cast<const typename T::Grad*>(call.grad);
    auto* mean = static_cast<typename T::State*>(call.states[0]);
    auto* var = static_cast<typename T::State*>(call.states[1]);
    ForEachBlock(call.count, [&](size_t first, auto count) {
      Block<T, kClip, kSquareFirst>(weight + first, grad + first, mean + first, var + first, count,
                                    k);
    });
  }

  template <typename T, bool kClip, bool kSquareFirst, typename Count>
  static void Block(typename T::Weight* __restrict weight, const typename T::Grad* __restrict grad,
                    typename T::State* __restrict mean, typename T::State* __restrict var,
                    Count count, const Constants<typename T::Compute>& k) {
    using C = typename T::Compute;
    using S = typename T::State;
    for (size_t i = 0; i < count; ++i) {
      const C w = Load<C>(weight[i]);
      C g = Load<C>(grad[i]) * k.rescale + w * k.wd;
      if constexpr (kClip) g = ClipTo(g, k.clip);
      const C m = RoundTrip<S>(k.beta1 * Load<C>(mean[i]) + (C(1) - k.beta1) * g);
      const C v = kSquareFirst
                      ? RoundTrip<S>(k.beta2 * Load<C>(var[i]) + (C(1) - k.beta2) * (g * g))
                      : RoundTrip<S>(k.beta2 * Load<C>(var[i]) + (C(1) - k.beta2) * g * g);
      mean[i] = Store<S>(m);
      var[i] = Store<S>(v);
      weight[i] = Store<typename T::Weight>(w - k.lr * m / (std::sqrt(v) + k.epsilon));
    }
  }

  double beta1_ = 0.9;
  double beta2_ = 0.999;
  double epsilon_ = 1e-8;
  bool lazy_update_ = true;
};

}  // namespace

std::unique_ptr<Optimizer> MakeAdamOptimizer(OptimizerParamReader& params) {
  return std::make_unique<AdamOptimizer>(params);
}

}  // namespace tandem::kv
