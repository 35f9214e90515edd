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
  // Every handle is waited for, also after one failed: the gradients stay
  // borrowed until each operation ended (after a change of an elastic
  // job's workers they all end at once, with MembershipChanged).
  std::exception_ptr first;
  for (const tandem::CollectiveHandle& h : handles) {
    try {
      h.Wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void AllreduceGradientExchange::ShareLeaderState(std::string& state) {
  tandem::Communicator& world = collectives_->world();
  int64_t length = static_cast<int64_t>(state.size());
  world.Broadcast(tandem::TensorView{&length, tandem::DType::kI64, {1}}, 0,
                  {.name = "leader state length"});
  state.resize(static_cast<size_t>(length));
  world.Broadcast(tandem::TensorView{state.data(), tandem::DType::kU8, {length}}, 0,
                  {.name = "leader state"});
}

}  // namespace fashion_mnist
