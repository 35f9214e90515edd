// Gradients through tandem's KVStore (docs/kvstore.md): one int key per
// parameter, pushed and pulled in one round trip (PushPull) per step.
#pragma once

#include <memory>
#include <optional>

#include "gradient_exchange.h"
#include "tandem/kvstore.h"

namespace fashion_mnist {

/// The parameter-server exchange. With `server_sgd` the servers run SGD
/// with those parameters (SetOptimizer) and a step pulls the new weights;
/// without it (dist_sync or local only) the servers keep each round's sum,
/// which a step pulls back into the gradients.
///
/// Thread-safety: as GradientExchange; owns the store.
class KvGradientExchange : public GradientExchange {
 public:
  KvGradientExchange(std::unique_ptr<tandem::KVStore> store,
                     std::optional<tandem::KVParams> server_sgd);

  int rank() const override { return store_->Rank(); }
  int num_workers() const override { return store_->NumWorkers(); }
  std::string mode() const override { return store_->type(); }
  void ShareInitialWeights(const std::vector<tandem::TensorView>& weights) override;
  bool updates_weights() const override { return server_sgd_.has_value(); }
  void Exchange(const std::vector<tandem::TensorView>& grads,
                const std::vector<tandem::TensorView>& weights) override;
  void SaveOptimizerStates(const std::string& path) override;
  void LoadOptimizerStates(const std::string& path) override;
  bool has_store_checkpoints() const override;
  uint64_t SaveStoreCheckpoint(const std::string& dir, const std::string& user_state) override;
  std::optional<std::string> LoadStoreCheckpoint(
      const std::string& dir, const std::vector<tandem::TensorView>& weights) override;

 private:
  std::unique_ptr<tandem::KVStore> store_;
  std::optional<tandem::KVParams> server_sgd_;
};

}  // namespace fashion_mnist
