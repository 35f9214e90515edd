// Bulk conversion between floating-point dtypes: what an allreduce with a
// narrower wire dtype (ReduceOptions::wire_dtype) does to its data before
// and after the reduction.
#pragma once

#include <cstddef>

#include "base/dtype.h"

namespace tandem::base {

/// True when Convert handles `from` -> `to`: float32 or float64 to and from
/// float16 or bfloat16, and float32 <-> float64.
bool CanConvert(DType from, DType to);

/// Writes `count` elements of `src` (dtype `from`) into `dst` (dtype `to`),
/// rounding to nearest-even where `to` is narrower (dtype.h's conversions;
/// a float64 is first rounded to float32). `src` and `dst` must not
/// overlap. Throws InvalidArgument naming both dtypes when !CanConvert.
void Convert(DType from, const void* src, DType to, void* dst, size_t count);

}  // namespace tandem::base
