#include "allreduce_gradient_exchange.h"

#include <cstdio>
#include <exception>

namespace fashion_mnist {

AllreduceGradientExchange::AllreduceGradientExchange(
    std::unique_ptr<tandem::Collectives> collectives, std::optional<tandem::DType> wire)
    : collectives_(std::move(collectives)), wire_(wire) {}

AllreduceGradientExchange::~AllreduceGradientExchange() {
  try {
    collectives_->Finalize();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "leaving the job failed: %s\n", e.what());
  }
}

void AllreduceGradientExchange::ShareInitialWeights(
    const std::vector<tandem::TensorView>& weights) {
  for (size_t i = 0; i < weights.size(); ++i) {
    collectives_->world().Broadcast(weights[i], 0, {.name = "weight " + std::to_string(i)});
  }
}

int64_t AllreduceGradientExchange::PayloadBytes(
    const std::vector<tandem::TensorView>& weights) const {
  const int64_t bytes = Float32Bytes(weights);
  return wire_ ? bytes / 2 : bytes;  // float16 and bfloat16: half of float32
}

void AllreduceGradientExchange::Exchange(const std::vector<tandem::TensorView>& grads,
                                         const std::vector<tandem::TensorView>&) {
  std::vector<tandem::CollectiveHandle> handles;
  handles.reserve(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    tandem::ReduceOptions options;
    options.name = "gradient " + std::to_string(i);
    options.wire_dtype = wire_;
    handles.push_back(collectives_->world().AllReduceAsync(grads[i], grads[i], options));
  }
  for (const tandem::CollectiveHandle& h : handles) h.Wait();
}

}  // namespace fashion_mnist
