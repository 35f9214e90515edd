// Element-wise reductions of two buffers, for every DType: what a server's
// merge, a local multi-device aggregation and every collective algorithm
// apply to the data they combine.
//
// Semantics (docs/dtypes.md restates them for users):
// - Floating point: one IEEE-754 operation per element in the element's own
//   precision, so results are bit-identical to a scalar loop whatever the
//   vector width. float16 and bfloat16 elements are widened to float,
//   combined, and rounded once (to nearest even) back; for two operands this
//   is the correctly rounded half/bfloat16 result.
// - kMin and kMax propagate NaN, as torch.minimum/maximum do: if either
//   operand is NaN the result is NaN (the first operand's, when both are).
//   Between equal operands, +0 and -0 included, the first operand wins.
// - Integers: kSum and kProd wrap modulo 2^bits (two's complement for the
//   signed types), never undefined behaviour.
//
// There is no averaging op: an average is a kSum followed by Scale(1/n),
// which is how the collectives implement "avg".
//
// Every function here is pure with respect to its buffers and may be called
// from any thread, concurrently on disjoint buffers; the loops work on
// fixed-size blocks so that g++ vectorises them at -O2.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/dtype.h"

namespace tandem::base {

/// A reduction operator. The value is the wire encoding (one byte).
enum class ReduceOp : uint8_t {
  kSum = 0,   ///< "sum"
  kProd = 1,  ///< "prod"
  kMin = 2,   ///< "min"
  kMax = 3,   ///< "max"
};

/// The number of ReduceOp values; every wire value below it is valid.
inline constexpr uint8_t kReduceOpCount = 4;

/// The lower-case name of `op` ("sum", "prod", "min", "max"). Throws
/// InvalidArgument for a value outside the enum.
std::string_view ReduceOpName(ReduceOp op);

/// The ReduceOp named `name` (exactly one of ReduceOpName's spellings).
/// Throws InvalidArgument quoting `name` and listing the accepted names.
ReduceOp ParseReduceOp(std::string_view name);

/// The ReduceOp whose wire value is `value`. Throws ProtocolError naming
/// the value when no ReduceOp has it.
ReduceOp ReduceOpFromWire(uint8_t value);

/// inout[i] = op(inout[i], in[i]) for i in [0, count), elements of `dtype`.
/// Requires: both buffers hold `count` elements (either may be null when
/// count is 0); they are the same buffer or do not overlap. Throws
/// InvalidArgument for a partial overlap, a null buffer with count > 0, or
/// a dtype/op outside its enum; the buffers are then unchanged.
void Reduce(ReduceOp op, DType dtype, void* inout, const void* in, size_t count);

/// out[i] = op(a[i], b[i]) for i in [0, count). Requires: the three buffers
/// hold `count` elements; `out` is the same buffer as `a` or `b`, or
/// overlaps neither (`a` and `b` may overlap each other freely). Throws
/// InvalidArgument as Reduce does.
void ReduceInto(ReduceOp op, DType dtype, void* out, const void* a, const void* b, size_t count);

/// data[i] *= factor, for averaging a sum. The product is formed in double
/// and rounded to the element type (float16/bfloat16 through float).
/// Requires: a floating-point dtype; `data` holds `count` elements. Throws
/// InvalidArgument for an integer dtype (naming it) or a null buffer with
/// count > 0.
void Scale(DType dtype, void* data, size_t count, double factor);

}  // namespace tandem::base
