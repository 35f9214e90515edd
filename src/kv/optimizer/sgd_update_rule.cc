#include "kv/optimizer/sgd_update_rule.h"

namespace tandem::kv {
namespace {

template <typename C>
struct Constants {
  C lr, wd, rescale, clip;
};

template <typename T, bool kClip, typename Count>
void Block(typename T::Weight* __restrict weight, const typename T::Grad* __restrict grad,
           Count count, const Constants<typename T::Compute>& k) {
  using C = typename T::Compute;
  using W = typename T::Weight;
  for (size_t i = 0; i < count; ++i) {
    const C w = Load<C>(weight[i]);
    const C g = Load<C>(grad[i]);
    if constexpr (kClip) {
      weight[i] = Store<W>((C(1) - k.lr * k.wd) * w - k.lr * ClipTo(k.rescale * g, k.clip));
    } else {
      weight[i] = Store<W>((C(1) - k.lr * k.wd) * w - (k.lr * k.rescale) * g);
    }
  }
}

template <typename T, bool kClip>
void Run(const KernelCall& call, const CommonHyperParams& common) {
  using C = typename T::Compute;
  const float lr = static_cast<float>(call.lr);
  const float wd = static_cast<float>(common.wd);
  const float rescale = static_cast<float>(common.rescale_grad);
  const float clip = static_cast<float>(common.clip_gradient.value_or(-1.0));
  const Constants<C> k{lr, wd, rescale, clip};
  auto* weight = static_cast<typename T::Weight*>(call.weight);
  const auto* grad = static_cast<const typename T::Grad*>(call.grad);
  ForEachBlock(call.count, [&](size_t first, auto count) {
    Block<T, kClip>(weight + first, grad + first, count, k);
  });
}

}  // namespace

void RunSgdUpdateRule(Precision precision, const KernelCall& call, const CommonHyperParams& common,
                      bool clip) {
  DispatchPrecision(precision, [&]<typename T>(T) {
    if (clip) {
      Run<T, true>(call, common);
    } else {
      Run<T, false>(call, common);
    }
  });
}

}  // namespace tandem::kv
