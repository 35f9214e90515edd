// Gradients through tandem's KVStore (docs/kvstore.md): one int key per
// parameter, pushed and pulled in one round trip (PushPull) per step;
// optionally with the store's 2bit/1bit gradient compression
// (docs/gradient-compression.md): pushes travel quantised, the servers sum
// the expanded values.
#pragma once

#include <memory>
#include <optional>

#include "gradient_exchange.h"
#include "tandem/kvstore.h"

namespace fashion_mnist {

/// The parameter-server exchange. With `server_sgd` the servers run SGD
/// with those parameters (SetOptimizer) and a step pulls the new weights;
/// without it (dist_sync or local only) the servers keep each round's sum,
/// which a step pulls back into the gradients. With `compression` (MXNet's
/// dictionary, {"type": "2bit", "threshold": "0.001"}) every push is
/// quantised with a residual per key.
///
/// Thread-safety: as GradientExchange; owns the store.
class KvGradientExchange : public GradientExchange {
 public:
  /// Throws tandem::InvalidArgument for bad `compression` parameters or a
  /// store without compression (local).
  KvGradientExchange(std::unique_ptr<tandem::KVStore> store,
                     std::optional<tandem::KVParams> server_sgd,
                     std::optional<tandem::KVParams> compression = std::nullopt);

  int rank() const override { return store_->Rank(); }
  int num_workers() const override { return store_->NumWorkers(); }
  std::string mode() const override { return store_->type(); }
  void ShareInitialWeights(const std::vector<tandem::TensorView>& weights) override;
  bool updates_weights() const override { return server_sgd_.has_value(); }
  void Exchange(const std::vector<tandem::TensorView>& grads,
                const std::vector<tandem::TensorView>& weights) override;
  void SaveOptimizerStates(const std::string& path) override;
  void LoadOptimizerStates(const std::string& path) override;
  int64_t PayloadBytes(const std::vector<tandem::TensorView>& weights) const override;
  tandem::Members ElasticBarrier() override { return store_->Barrier(); }
  bool has_store_checkpoints() const override;
  uint64_t SaveStoreCheckpoint(const std::string& dir, const std::string& user_state) override;
  std::optional<std::string> LoadStoreCheckpoint(
      const std::string& dir, const std::vector<tandem::TensorView>& weights) override;

 private:
  std::unique_ptr<tandem::KVStore> store_;
  std::optional<tandem::KVParams> server_sgd_;
  std::optional<tandem::GradientQuantizer> quantizer_;  // sizes the compressed pushes
};

}  // namespace fashion_mnist
