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
#include <fmt/format.h>

#include <cmath>

#include "kv/optimizer/optimizer_base.h"
#include "tandem/error.h"

namespace tandem::kv {
namespace {

class AdaGradOptimizer final : public OptimizerBase {
 public:
  explicit AdaGradOptimizer(OptimizerParamReader& params) : OptimizerBase("adagrad", params, 0.01) {
    eps_ = params.GetDoubleIn("eps", 1e-7, OptimizerParamReader::kNonNegative);
  }

  size_t NumStates() const override { return 1; }

  // A row-sparse gradient goes to MXNet's sparse adagrad_update, lazily.
  bool LazyRows(bool) const override { return true; }

  void CheckLazyRows(uint64_t key) const override {
    if (common().wd != 0) {
      throw InvalidArgument(fmt::format(
          "optimizer 'adagrad': key {}: a row-sparse update does not support wd (wd is {}), as "
          "MXNet's sparse adagrad_update",
          key, common().wd));
    }
  }

  // The sparse kernel, with float32 operator parameters:
  //   g = clip(rescale_grad * grad, clip_gradient); history += g * g;
  //   w = w - (g / sqrt(history + eps)) * lr
  void RunRowKernel(Precision precision, const KernelCall& call) override {
    DispatchPrecision(precision, [&]<typename T>(T) {
      using C = typename T::Compute;
      using S = typename T::State;
      const C rescale = static_cast<float>(common().rescale_grad);
      const C clip = static_cast<float>(common().clip_gradient.value_or(-1.0));
      const C eps = static_cast<float>(eps_);
      const C lr = static_cast<float>(call.lr);
      auto* weight = static_cast<typename T::Weight*>(call.weight);
      const auto* grad = static_cast<const typename T::Grad*>(call.grad);
      auto* history = static_cast<S*>(call.states[0]);
      const bool clips = KernelClipsGradient();
      for (size_t i = 0; i < call.count; ++i) {
        C g = Load<C>(grad[i]) * rescale;
        if (clips) g = ClipTo(g, clip);
        const C h = RoundTrip<S>(Load<C>(history[i]) + g * g);
        history[i] = Store<S>(h);
        weight[i] = Store<typename T::Weight>(Load<C>(weight[i]) - g / std::sqrt(h + eps) * lr);
      }
    });
  }

  void RunKernel(Precision precision, const KernelCall& call) override {
    DispatchPrecision(precision, [&]<typename T>(T) {
      DispatchBool(common().clip_gradient.has_value(),
                   [&]<typename Clip>(Clip) { Run<T, Clip::value>(call); });
    });
  }

 private:
  template <typename C>
  struct Constants {
    C rescale, wd, minus_lr, eps, clip;
  };

  template <typename T, bool kClip>
  void Run(const KernelCall& call) const {
    using C = typename T::Compute;
    // Python scalars are converted from double to the array's type; clip's
    // a_min/a_max are float32 operator parameters.
    const Constants<C> k{static_cast<C>(common().rescale_grad), static_cast<C>(common().wd),
                         static_cast<C>(-call.lr), static_cast<C>(eps_),
                         static_cast<float>(common().clip_gradient.value_or(0.0))};
    auto* weight = static_cast<typename T::Weight*>(call.weight);
    const auto* grad = static_cast<const typename T::Grad*>(call.grad);
    auto* history = static_cast<typename T::State*>(call.states[0]);
    ForEachBlock(call.count, [&](size_t first, auto count) {
      Block<T, kClip>(weight + first, grad + first, history + first, count, k);
    });
  }

  template <typename T, bool kClip, typename Count>
  static void Block(typename T::Weight* __restrict weight, const typename T::Grad* __restrict grad,
                    typename T::State* __restrict history, Count count,
                    const Constants<typename T::Compute>& k) {
    using C = typename T::Compute;
    using S = typename T::State;
    for (size_t i = 0; i < count; ++i) {
      const C w = Load<C>(weight[i]);
      C g = Load<C>(grad[i]) * k.rescale;
      if constexpr (kClip) g = g > k.clip ? k.clip : (g < -k.clip ? -k.clip : g);
      const C h = RoundTrip<S>(Load<C>(history[i]) + g * g);
      history[i] = Store<S>(h);
      const C div = g / std::sqrt(h + k.eps);
      weight[i] = Store<typename T::Weight>(w + (div + w * k.wd) * k.minus_lr);
    }
  }

  double eps_ = 1e-7;
};

}  // namespace

std::unique_ptr<Optimizer> MakeAdaGradOptimizer(OptimizerParamReader& params) {
  return std::make_unique<AdaGradOptimizer>(params);
}

}  // namespace tandem::kv
