#include "kv_gradient_exchange.h"

namespace fashion_mnist {

KvGradientExchange::KvGradientExchange(std::unique_ptr<tandem::KVStore> store,
                                       std::optional<tandem::KVParams> server_sgd,
                                       std::optional<tandem::KVParams> compression)
    : store_(std::move(store)), server_sgd_(std::move(server_sgd)) {
  if (compression) {
    quantizer_.emplace(*compression);
    store_->SetGradientCompression(*compression);  // before the first Init, as it must be
  }
}

int64_t KvGradientExchange::PayloadBytes(const std::vector<tandem::TensorView>& weights) const {
  return quantizer_ ? QuantizedBytes(*quantizer_, weights) : Float32Bytes(weights);
}

void KvGradientExchange::ShareInitialWeights(const std::vector<tandem::TensorView>& weights) {
  // Init sends worker 0's values (then a barrier); the pull gives them to all.
  for (size_t i = 0; i < weights.size(); ++i) store_->Init(static_cast<int>(i), weights[i]);
  for (size_t i = 0; i < weights.size(); ++i) store_->Pull(static_cast<int>(i), weights[i]);
  if (server_sgd_) store_->SetOptimizer("sgd", *server_sgd_);
}

void KvGradientExchange::Exchange(const std::vector<tandem::TensorView>& grads,
                                  const std::vector<tandem::TensorView>& weights) {
  // Every key goes out at once; the first layers first (the next forward
  // pass needs them first).
  std::vector<tandem::KVHandle> handles;
  handles.reserve(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    const tandem::TensorView& out = server_sgd_ ? weights[i] : grads[i];
    handles.push_back(
        store_->PushPullAsync(static_cast<int>(i), {grads[i]}, {out}, -static_cast<int>(i)));
  }
  for (const tandem::KVHandle& h : handles) h.Wait();
}

void KvGradientExchange::SaveOptimizerStates(const std::string& path) {
  if (server_sgd_) store_->SaveOptimizerStates(path);
}

void KvGradientExchange::LoadOptimizerStates(const std::string& path) {
  if (server_sgd_) store_->LoadOptimizerStates(path);
}

bool KvGradientExchange::has_store_checkpoints() const {
  return store_->type().rfind("dist", 0) == 0;
}

uint64_t KvGradientExchange::SaveStoreCheckpoint(const std::string& dir,
                                                 const std::string& user_state) {
  return store_->SaveCheckpoint(dir, user_state);
}

std::optional<std::string> KvGradientExchange::LoadStoreCheckpoint(
    const std::string& dir, const std::vector<tandem::TensorView>& weights) {
  std::optional<tandem::KVCheckpoint> loaded = store_->LoadCheckpoint(dir);
  if (!loaded) return std::nullopt;
  if (server_sgd_) {
    for (size_t i = 0; i < weights.size(); ++i) store_->Pull(static_cast<int>(i), weights[i]);
  }
  // Nobody pushes the next step before every worker pulled.
  store_->Barrier();
  return std::move(loaded->user_state);
}

}  // namespace fashion_mnist
