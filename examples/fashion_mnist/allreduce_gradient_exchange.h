// Gradients through tandem's collectives (docs/collectives.md): an in-place
// sum allreduce per parameter; every worker then runs the optimizer itself.
#pragma once

#include <memory>

#include "gradient_exchange.h"
#include "tandem/collective.h"

namespace fashion_mnist {

/// The allreduce exchange.
///
/// Thread-safety: as GradientExchange; owns the collectives.
class AllreduceGradientExchange : public GradientExchange {
 public:
  explicit AllreduceGradientExchange(std::unique_ptr<tandem::Collectives> collectives);
  /// Finalizes the collectives (waits for queued operations, leaves the job).
  ~AllreduceGradientExchange() override;

  int rank() const override { return collectives_->world().rank(); }
  int num_workers() const override { return collectives_->world().size(); }
  std::string mode() const override { return "allreduce"; }
  void ShareInitialWeights(const std::vector<tandem::TensorView>& weights) override;
  bool updates_weights() const override { return false; }
  void Exchange(const std::vector<tandem::TensorView>& grads,
                const std::vector<tandem::TensorView>& weights) override;
  void SaveOptimizerStates(const std::string&) override {}
  void LoadOptimizerStates(const std::string&) override {}

 private:
  std::unique_ptr<tandem::Collectives> collectives_;
};

}  // namespace fashion_mnist
