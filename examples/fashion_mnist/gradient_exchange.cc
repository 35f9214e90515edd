#include "gradient_exchange.h"

#include <fmt/format.h>

#include "tandem/error.h"

namespace fashion_mnist {

int64_t Float32Bytes(const std::vector<tandem::TensorView>& weights) {
  int64_t bytes = 0;
  for (const tandem::TensorView& w : weights) bytes += w.num_elements() * 4;
  return bytes;
}

int64_t QuantizedBytes(const tandem::GradientQuantizer& quantizer,
                       const std::vector<tandem::TensorView>& weights) {
  int64_t bytes = 0;
  for (const tandem::TensorView& w : weights) {
    bytes += static_cast<int64_t>(quantizer.QuantizedBytes(static_cast<size_t>(w.num_elements())));
  }
  return bytes;
}

int64_t GradientExchange::PayloadBytes(const std::vector<tandem::TensorView>& weights) const {
  return Float32Bytes(weights);
}

tandem::Members GradientExchange::ElasticBarrier() {
  throw tandem::InvalidArgument(fmt::format(
      "the {} exchange is not elastic: only the parameter server's workers can leave a running "
      "job (docs/elastic.md)",
      mode()));
}

tandem::Members GradientExchange::CurrentMembers() const {
  throw tandem::InvalidArgument(fmt::format(
      "the {} exchange does not take workers into a running job (docs/elastic.md)", mode()));
}

void GradientExchange::ShareLeaderState(std::string&) {
  throw tandem::InvalidArgument(
      fmt::format("the {} exchange does not abandon steps when a worker leaves: nothing to share "
                  "(docs/elastic.md)",
                  mode()));
}

uint64_t GradientExchange::SaveStoreCheckpoint(const std::string& dir, const std::string&) {
  throw tandem::InvalidArgument(fmt::format(
      "store checkpoint into {}: the {} exchange has no parameter-server store to checkpoint", dir,
      mode()));
}

std::optional<std::string> GradientExchange::LoadStoreCheckpoint(
    const std::string& dir, const std::vector<tandem::TensorView>&) {
  throw tandem::InvalidArgument(fmt::format(
      "store checkpoint from {}: the {} exchange has no parameter-server store to restore", dir,
      mode()));
}

}  // namespace fashion_mnist
