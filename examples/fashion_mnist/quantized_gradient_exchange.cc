#include "quantized_gradient_exchange.h"

#include <fmt/format.h>

#include <cstring>

#include "tandem/error.h"

namespace fashion_mnist {

QuantizedGradientExchange::QuantizedGradientExchange(
    std::unique_ptr<tandem::Collectives> collectives,
    const std::map<std::string, std::string>& params)
    : AllreduceGradientExchange(std::move(collectives), std::nullopt), quantizer_(params) {}

int64_t QuantizedGradientExchange::PayloadBytes(
    const std::vector<tandem::TensorView>& weights) const {
  return QuantizedBytes(quantizer_, weights);
}

void QuantizedGradientExchange::Exchange(const std::vector<tandem::TensorView>& grads,
                                         const std::vector<tandem::TensorView>&) {
  const auto workers = static_cast<size_t>(num_workers());
  if (residuals_.empty()) {
    for (const tandem::TensorView& g : grads) {
      const auto n = static_cast<size_t>(g.num_elements());
      const size_t bytes = quantizer_.QuantizedBytes(n);
      residuals_.emplace_back(n, 0.0F);
      mine_.emplace_back(bytes);
      gathered_.emplace_back(bytes * workers);
    }
  }
  if (grads.size() != residuals_.size()) {
    throw tandem::InvalidArgument(fmt::format("{} exchange: {} gradients, the first step had {}",
                                              mode(), grads.size(), residuals_.size()));
  }
  auto u8 = [](std::vector<uint8_t>& v, size_t offset, size_t bytes) {
    return tandem::TensorView{v.data() + offset, tandem::DType::kU8, {static_cast<int64_t>(bytes)}};
  };
  std::vector<tandem::CollectiveHandle> handles;
  handles.reserve(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    // Quantize checks the gradient's dtype and size against the residual.
    const tandem::TensorView residual{
        residuals_[i].data(), tandem::DType::kF32, {static_cast<int64_t>(residuals_[i].size())}};
    const size_t bytes = mine_[i].size();
    quantizer_.Quantize(grads[i], residual, u8(mine_[i], 0, bytes));
    handles.push_back(
        world().AllGatherAsync(u8(mine_[i], 0, bytes), u8(gathered_[i], 0, bytes * workers),
                               {.name = fmt::format("gradient {} ({})", i, quantizer_.type())}));
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    handles[i].Wait();
    const size_t bytes = mine_[i].size();
    std::memset(grads[i].data, 0, grads[i].num_bytes());
    for (size_t r = 0; r < workers; ++r) {
      quantizer_.DequantizeAdd(u8(gathered_[i], r * bytes, bytes), grads[i]);
    }
  }
}

}  // namespace fashion_mnist
