// How the workers of the main job combine their gradients: through the
// parameter server (kv_gradient_exchange.h) or through allreduce
// (allreduce_gradient_exchange.h). docs/training.md, "Modes".
//
// Parameters are numbered 0..n-1 in the model's order; every worker passes
// them in that order, as float32 views of its own memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tandem/cluster.h"
#include "tandem/gradient_quantizer.h"
#include "tandem/tensor.h"

namespace fashion_mnist {

/// Bytes of `weights` as float32 values. Never throws.
int64_t Float32Bytes(const std::vector<tandem::TensorView>& weights);
/// Bytes of `weights` quantised by `quantizer` (whole words per tensor).
/// Never throws.
int64_t QuantizedBytes(const tandem::GradientQuantizer& quantizer,
                       const std::vector<tandem::TensorView>& weights);

/// One worker's end of the gradient exchange.
///
/// Thread-safety: one thread (the training loop) calls every method.
class GradientExchange {
 public:
  virtual ~GradientExchange() = default;

  /// This worker's rank and the number of workers.
  virtual int rank() const = 0;
  virtual int num_workers() const = 0;
  /// "dist_sync", "dist_async", "local" or "allreduce", for messages.
  virtual std::string mode() const = 0;

  /// Makes `weights` on every worker equal to worker 0's. Every worker calls
  /// it once, before training. Throws what tandem's calls throw.
  virtual void ShareInitialWeights(const std::vector<tandem::TensorView>& weights) = 0;

  /// True when Exchange leaves the updated weights in `weights` (the
  /// servers run the optimizer); false when it leaves the sum of every
  /// worker's gradient in `grads` and the caller runs the optimizer.
  virtual bool updates_weights() const = 0;

  /// One step's exchange: every worker calls it with its gradients. Blocks
  /// until done. Throws tandem::PeerLost, tandem::Timeout and the like.
  virtual void Exchange(const std::vector<tandem::TensorView>& grads,
                        const std::vector<tandem::TensorView>& weights) = 0;

  /// The bytes of gradients this worker hands to the network per step for
  /// parameters shaped as `weights` (before any algorithm's copies: what
  /// compression changes). Float32 by default. Never throws.
  virtual int64_t PayloadBytes(const std::vector<tandem::TensorView>& weights) const;

  /// Saves / loads the servers' optimizer states under `path` (each server
  /// writes "<path>.server<rank>"); nothing when the optimizer runs on the
  /// workers. Every worker calls them. Throws tandem::IoError.
  virtual void SaveOptimizerStates(const std::string& path) = 0;
  virtual void LoadOptimizerStates(const std::string& path) = 0;

  /// The workers meet in a barrier; returns the members at its release,
  /// the same on every worker (tandem::KVStore::Barrier), which an elastic
  /// run re-shards by. Throws tandem::InvalidArgument for an exchange without
  /// elastic membership (only the parameter server's has it), PeerLost,
  /// Timeout.
  virtual tandem::Members ElasticBarrier();

  /// After Exchange raised tandem::MembershipChanged and ElasticBarrier
  /// regrouped the workers: every worker's `state` becomes that of the
  /// lowest worker that remains (its bytes, any length). Every remaining
  /// worker calls it. Throws tandem::InvalidArgument for an exchange whose
  /// steps are not abandoned by a change (the parameter server's: its
  /// rounds complete with the workers that remain), MembershipChanged when
  /// another worker left meanwhile, PeerLost, Timeout.
  virtual void ShareLeaderState(std::string& state);

  /// Elastic runs whose steps a change abandons (the allreduce exchanges):
  /// whether this worker was admitted into the running job in a departed
  /// worker's place (tandem::Cluster::joined_running_job); false otherwise.
  virtual bool joined_running_job() const { return false; }
  /// The members as this worker knows them now (tandem::Cluster's epoch and
  /// workers). Throws tandem::InvalidArgument where ElasticBarrier does.
  virtual tandem::Members CurrentMembers() const;
  /// Whether workers wait to join the running job, agreed by every member
  /// (tandem::Collectives::CheckJoins): throws tandem::MembershipChanged when
  /// they do, and the members then regroup (ElasticBarrier) to admit one.
  /// Does nothing for an exchange whose running job takes no new workers.
  virtual void CheckJoins() {}

  /// True when the exchange can checkpoint its store (a distributed
  /// KVStore: docs/checkpoints.md).
  virtual bool has_store_checkpoints() const { return false; }
  /// A store checkpoint (KVStore::SaveCheckpoint) in `dir` carrying this
  /// worker's `user_state`. Every worker calls it after the same step.
  /// Returns the round. Throws tandem::InvalidArgument without store
  /// checkpoints, and what SaveCheckpoint throws.
  virtual uint64_t SaveStoreCheckpoint(const std::string& dir, const std::string& user_state);
  /// Loads the newest consistent store checkpoint of `dir`; when the
  /// servers run the optimizer, `weights` then hold its values. Returns this
  /// worker's user state, or nullopt when `dir` holds none. Every worker
  /// calls it after ShareInitialWeights. Throws as SaveStoreCheckpoint.
  virtual std::optional<std::string> LoadStoreCheckpoint(
      const std::string& dir, const std::vector<tandem::TensorView>& weights);
};

}  // namespace fashion_mnist
