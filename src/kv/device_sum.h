// Local aggregation: the values one worker holds for a key on several
// devices (here: several buffers of the process) summed into one, as
// MXNet's Comm::Reduce. Arrays of at least MXNET_KVSTORE_BIGARRAY_BOUND
// elements are summed by MXNET_KVSTORE_REDUCTION_NTHREADS threads in
// disjoint chunks; smaller ones on the calling thread.
#pragma once

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "tandem/tensor.h"

namespace tandem::kv {

/// out = values[0] + values[1] + ... element-wise, in that order (so the
/// result is the same whatever the thread count). Requires: values not
/// empty, all of `out`'s dtype and element count; `out` may be values[0]'s
/// buffer. `pool` may be null (then one thread). Any thread.
void SumDeviceValues(const std::vector<TensorView>& values, void* out, base::ThreadPool* pool,
                     uint64_t big_array_bound);

}  // namespace tandem::kv
