// Gradients through tandem's collectives (docs/collectives.md): an in-place
// sum allreduce per parameter, optionally in a narrower wire dtype
// (--compression fp16|bf16: ReduceOptions::wire_dtype); every worker then
// runs the optimizer itself. The 2bit/1bit and PowerSGD exchanges
// (quantized_gradient_exchange.h, powersgd_gradient_exchange.h) replace
// Exchange and keep the rest.
#pragma once

#include <memory>
#include <optional>

#include "gradient_exchange.h"
#include "tandem/collective.h"

namespace fashion_mnist {

/// The allreduce exchange.
///
/// Thread-safety: as GradientExchange; owns the collectives.
class AllreduceGradientExchange : public GradientExchange {
 public:
  /// `wire`: the dtype the gradients travel in (empty: their own).
  AllreduceGradientExchange(std::unique_ptr<tandem::Collectives> collectives,
                            std::optional<tandem::DType> wire);
  /// Finalizes the collectives (waits for queued operations, leaves the job).
  ~AllreduceGradientExchange() override;

  /// The worker rank (the world's rank until an elastic job's workers
  /// regroup; tandem::Cluster::rank() after).
  int rank() const override { return collectives_->cluster().rank(); }
  int num_workers() const override { return collectives_->world().size(); }
  std::string mode() const override { return "allreduce"; }
  void ShareInitialWeights(const std::vector<tandem::TensorView>& weights) override;
  bool updates_weights() const override { return false; }
  void Exchange(const std::vector<tandem::TensorView>& grads,
                const std::vector<tandem::TensorView>& weights) override;
  int64_t PayloadBytes(const std::vector<tandem::TensorView>& weights) const override;
  /// Elastic runs (docs/elastic.md, "The main job"): Collectives::Regroup.
  tandem::Members ElasticBarrier() override { return collectives_->Regroup(); }
  bool joined_running_job() const override { return collectives_->cluster().joined_running_job(); }
  tandem::Members CurrentMembers() const override {
    return {collectives_->cluster().epoch(), collectives_->cluster().workers()};
  }
  /// Elastic runs (docs/elastic.md, "The main job"): Collectives::CheckJoins.
  void CheckJoins() override { collectives_->CheckJoins(); }
  /// Broadcasts the length, then the bytes, from group rank 0 of the world
  /// (the lowest worker that remains and trained with the others: a worker
  /// admitted at the regroup comes last in the world).
  void ShareLeaderState(std::string& state) override;
  void SaveOptimizerStates(const std::string&) override {}
  void LoadOptimizerStates(const std::string&) override {}

 protected:
  /// Every worker's communicator, for the exchanges built on this one.
  tandem::Communicator& world() { return collectives_->world(); }

 private:
  std::unique_ptr<tandem::Collectives> collectives_;
  std::optional<tandem::DType> wire_;
};

}  // namespace fashion_mnist
