// Local aggregation of device values.
#include "kv/device_sum.h"

#include <cstring>

#include "base/reduce.h"

namespace tandem::kv {

void SumDeviceValues(const std::vector<TensorView>& values, void* out, base::ThreadPool* pool,
                     uint64_t big_array_bound) {
  const DType dtype = values.front().dtype;
  const size_t n = static_cast<size_t>(values.front().num_elements());
  const size_t elem = ElementSize(dtype);
  auto sum_range = [&](size_t begin, size_t end) {
    auto* o = static_cast<std::byte*>(out) + begin * elem;
    const auto* first = static_cast<const std::byte*>(values[0].data) + begin * elem;
    if (values.size() == 1) {
      if (o != first) std::memcpy(o, first, (end - begin) * elem);
      return;
    }
    base::ReduceInto(base::ReduceOp::kSum, dtype, o, first,
                     static_cast<const std::byte*>(values[1].data) + begin * elem, end - begin);
    for (size_t i = 2; i < values.size(); ++i) {
      base::Reduce(base::ReduceOp::kSum, dtype, o,
                   static_cast<const std::byte*>(values[i].data) + begin * elem, end - begin);
    }
  };
  if (pool != nullptr && n >= big_array_bound && n > 0) {
    pool->ParallelFor(n, 1 << 16, sum_range);
  } else if (n > 0) {
    sum_range(0, n);
  }
}

}  // namespace tandem::kv
