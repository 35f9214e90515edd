// MXNet's 2-bit and 1-bit gradient quantisation as a public piece of its
// own, for quantising gradients outside the parameter server: tandem.torch's
// allreduce path allgathers each rank's quantised gradient and sums the
// dequantised ones (docs/python.md, "Quantised gradients"). The formats and
// the residual are docs/gradient-compression.md's, bit for bit the ones a
// KVStore's pushes carry.
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "tandem/tensor.h"

namespace tandem {

/// Quantises float32 gradients with an error-feedback residual and expands
/// them back. Holds only its parameters: the residual is the caller's.
///
/// Thread-safety: const methods may run concurrently on distinct buffers.
class GradientQuantizer {
 public:
  /// `params` in MXNet's dictionary form, as KVStore::SetGradientCompression
  /// takes it: {"type": "2bit"|"1bit", "threshold": "0.5"}. Throws
  /// InvalidArgument naming the bad entry, and for type "none" (nothing to
  /// quantise).
  explicit GradientQuantizer(const std::map<std::string, std::string>& params);

  /// "2bit" or "1bit".
  const std::string& type() const { return type_; }
  /// The threshold in use.
  float threshold() const { return threshold_; }

  /// Bytes of the quantised form of `count` values: whole 32-bit words,
  /// 16 values per word (2bit) or 32 (1bit).
  size_t QuantizedBytes(size_t count) const;

  /// Quantises `grad` + `residual` into `out` and leaves in `residual` what
  /// was not sent. grad and residual: float32 of one element count n (any
  /// shapes); out: uint8 of QuantizedBytes(n) elements. Throws
  /// InvalidArgument naming the argument and what was expected vs got.
  void Quantize(const TensorView& grad, const TensorView& residual, const TensorView& out) const;

  /// Expands `in` (uint8, QuantizedBytes(n) elements) into `out` (float32,
  /// n elements), the values MXNet's server sums. Throws InvalidArgument as
  /// Quantize.
  void Dequantize(const TensorView& in, const TensorView& out) const;

  /// As Dequantize, but adds the expanded values to `out` (out += values),
  /// in one pass over `out`: how a sum over the ranks' words is built.
  void DequantizeAdd(const TensorView& in, const TensorView& out) const;

 private:
  std::string type_;
  float threshold_ = 0.5f;
};

}  // namespace tandem
