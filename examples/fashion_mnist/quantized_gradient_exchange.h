// --allreduce --compression 2bit|1bit (docs/training.md, "Compression"):
// each worker quantises its gradient plus its residual into MXNet's words
// (tandem::GradientQuantizer, docs/gradient-compression.md), the workers
// allgather the words, and every worker expands and sums all of them in
// rank order, so the replicas stay identical. A worker sends 1/16 (2bit) or
// 1/32 (1bit) of the float32 bytes; what quantisation dropped stays in its
// residual and is sent in later steps. The sum is what a parameter server
// with the same compression would hand back.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "allreduce_gradient_exchange.h"

namespace fashion_mnist {

/// The quantised allreduce exchange.
///
/// Thread-safety: as GradientExchange.
class QuantizedGradientExchange : public AllreduceGradientExchange {
 public:
  /// `params`: MXNet's dictionary ({"type": "2bit", "threshold": "0.001"}).
  /// Throws tandem::InvalidArgument naming a bad entry.
  QuantizedGradientExchange(std::unique_ptr<tandem::Collectives> collectives,
                            const std::map<std::string, std::string>& params);

  std::string mode() const override { return "allreduce " + quantizer_.type(); }
  /// Leaves in `grads` the sum of every worker's dequantised gradient.
  /// Throws tandem::InvalidArgument for a gradient that is not float32, and
  /// what the allgather throws.
  void Exchange(const std::vector<tandem::TensorView>& grads,
                const std::vector<tandem::TensorView>& weights) override;
  int64_t PayloadBytes(const std::vector<tandem::TensorView>& weights) const override;

 private:
  tandem::GradientQuantizer quantizer_;
  // By parameter: the residual (float32), this worker's words and every
  // worker's words (rank-major), sized at the first step.
  std::vector<std::vector<float>> residuals_;
  std::vector<std::vector<uint8_t>> mine_;
  std::vector<std::vector<uint8_t>> gathered_;
};

}  // namespace fashion_mnist
