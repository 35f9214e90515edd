// --allreduce --compression powersgd (docs/training.md, "Compression"):
// PowerSGD (Vogels et al., 2019) as torch 1.13's powerSGD_hook and
// tandem.torch's PowerSGD define it, per parameter. A gradient viewed as an
// n x m matrix M (shape[0] x the rest) travels as P = M Q (n x r) and
// Q = M^T P (m x r) instead of n x m values:
//
//   M_i = g_i + e_i                        (e_i: this worker's error)
//   P = sum_i M_i Q, then orthonormalised  (Householder QR in float64)
//   Q' = sum_i M_i^T P
//   g = P Q'^T                             (the sum of the M_i projected on P)
//   e_i = M_i - g / W                      (error feedback, as torch's)
//
// Q is kept for the next step (warm start); the first Q of parameter j is
// drawn from a generator seeded with (seed, j), the same on every worker. A
// tensor is compressed only when (n + m) r * min_compression_rate < n m;
// the others, and every tensor before start_step, are summed whole.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "allreduce_gradient_exchange.h"

namespace fashion_mnist {

/// PowerSGD's parameters.
///
/// Thread-safety: a plain value.
struct PowerSgdOptions {
  int rank = 1;                       ///< r, before the per-tensor cap min(n, m)
  int64_t start_step = 10;            ///< steps before this one are plain sums
  double min_compression_rate = 2.0;  ///< compress only above this ratio
  uint64_t seed = 42;                 ///< the first Q's generator
};

/// The PowerSGD exchange.
///
/// Thread-safety: as GradientExchange.
class PowerSgdGradientExchange : public AllreduceGradientExchange {
 public:
  /// Throws tandem::InvalidArgument for a rank below 1 or a negative start
  /// step or rate.
  PowerSgdGradientExchange(std::unique_ptr<tandem::Collectives> collectives,
                           PowerSgdOptions options);

  std::string mode() const override;
  /// The rank a tensor of `shape` travels at; 0: it travels whole.
  int RankFor(const std::vector<int64_t>& shape) const;
  /// Leaves in `grads` the low-rank approximation of the sum of every
  /// worker's gradient plus error (whole sums for the tensors not
  /// compressed). Throws tandem::InvalidArgument for a gradient that is not
  /// float32, and what the allreduces throw.
  void Exchange(const std::vector<tandem::TensorView>& grads,
                const std::vector<tandem::TensorView>& weights) override;
  int64_t PayloadBytes(const std::vector<tandem::TensorView>& weights) const override;

 private:
  PowerSgdOptions options_;
  int64_t steps_ = 0;                      // exchanges so far (the same on every worker)
  std::map<size_t, torch::Tensor> q_;      // by parameter: the last Q (m x r)
  std::map<size_t, torch::Tensor> error_;  // by parameter: e_i (n x m)
};

}  // namespace fashion_mnist
