// MXNet's plain sgd_update kernel, which two optimizers use: nag without
// momentum, and sgd's lazy row update without momentum (the dense sgd on a
// kvstore runs multi_sgd_update instead, see sgd_optimizer.cc):
//
//   w = (1 - lr * wd) * w - lr * clip(rescale_grad * grad, clip_gradient)
//
// without clipping the last term is (lr * rescale_grad) * grad. Every
// hyper-parameter is a float32 kernel parameter.
#pragma once

#include "kv/optimizer/optimizer_base.h"

namespace tandem::kv {

/// Runs sgd_update over `call` with `common`'s wd, rescale_grad and
/// clip_gradient; `clip` says whether the kernel clips. Never throws.
void RunSgdUpdateRule(Precision precision, const KernelCall& call, const CommonHyperParams& common,
                      bool clip);

}  // namespace tandem::kv
