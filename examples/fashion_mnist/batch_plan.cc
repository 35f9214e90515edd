#include "batch_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "tandem/error.h"

namespace fashion_mnist {

BatchPlan::BatchPlan(int64_t num_examples, int num_parts, int part_index, int64_t batch_size,
                     const std::vector<double>& workload, uint64_t seed)
    : num_examples_(num_examples), part_index_(part_index), seed_(seed) {
  if (num_parts < 1 || part_index < 0 || part_index >= num_parts) {
    throw tandem::InvalidArgument(fmt::format(
        "part_index {} is not in 0..num_parts-1 (num_parts {})", part_index, num_parts));
  }
  if (batch_size < 1) {
    throw tandem::InvalidArgument(fmt::format("batch size {} must be at least 1", batch_size));
  }
  const int64_t global = batch_size * num_parts;
  if (workload.empty()) {
    batches_.assign(static_cast<size_t>(num_parts), batch_size);
  } else {
    if (workload.size() != static_cast<size_t>(num_parts)) {
      throw tandem::InvalidArgument(
          fmt::format("--workload has {} weights for {} workers; give one per worker",
                      workload.size(), num_parts));
    }
    double total = 0;
    for (size_t i = 0; i < workload.size(); ++i) {
      if (!(workload[i] > 0) || !std::isfinite(workload[i])) {
        throw tandem::InvalidArgument(
            fmt::format("--workload weight {} of worker {} must be positive", workload[i], i));
      }
      total += workload[i];
    }
    if (global < num_parts) {
      throw tandem::InvalidArgument(fmt::format(
          "global batch {} cannot give each of {} workers an example", global, num_parts));
    }
    // Every part gets 1, then the rest is split by largest remainder.
    const int64_t rest = global - num_parts;
    std::vector<double> exact(workload.size());
    int64_t given = 0;
    for (size_t i = 0; i < workload.size(); ++i) {
      exact[i] = static_cast<double>(rest) * workload[i] / total;
      batches_.push_back(1 + static_cast<int64_t>(std::floor(exact[i])));
      given += batches_.back() - 1;
    }
    std::vector<size_t> by_remainder(workload.size());
    std::iota(by_remainder.begin(), by_remainder.end(), size_t{0});
    std::stable_sort(by_remainder.begin(), by_remainder.end(), [&](size_t a, size_t b) {
      return exact[a] - std::floor(exact[a]) > exact[b] - std::floor(exact[b]);
    });
    for (size_t k = 0; given < rest; ++k, ++given) ++batches_[by_remainder[k]];
  }
  global_batch_ = std::accumulate(batches_.begin(), batches_.end(), int64_t{0});
  offset_ = std::accumulate(batches_.begin(), batches_.begin() + part_index, int64_t{0});
  if (global_batch_ > num_examples) {
    throw tandem::InvalidArgument(fmt::format(
        "global batch {} is larger than the {} training examples", global_batch_, num_examples));
  }
}

std::vector<int64_t> BatchPlan::EpochOrder(int epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(num_examples_));
  std::iota(order.begin(), order.end(), int64_t{0});
  // Fisher-Yates with the engine's raw output (no distribution object, whose
  // results the standard leaves to the library), so the order is the same
  // on every worker and every platform.
  std::mt19937_64 engine(seed_ * 1000003u + static_cast<uint64_t>(epoch));
  for (size_t i = order.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(engine() % i);
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

std::vector<int64_t> BatchPlan::LocalBatch(const std::vector<int64_t>& order, int64_t step) const {
  const auto begin = order.begin() + step * global_batch_ + offset_;
  return std::vector<int64_t>(begin, begin + local_batch());
}

}  // namespace fashion_mnist
