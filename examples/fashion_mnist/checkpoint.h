// Checkpoints of the main job (docs/training.md, "Checkpoints"): a
// directory holding
//
//   weights.pt        the model's parameters (torch::save of the tensor list)
//   worker-sgd.pt     the workers' SGD state (momentum), when they run it
//   kv-optimizer.server<r>  each server's optimizer states (KVStore's
//                     SaveOptimizerStates, written by the servers)
//   epoch             the number of epochs completed, as text; written last,
//                     so a checkpoint counts only once it is complete
//
// Every file is written to "<name>.tmp" and renamed into place.
#pragma once

#include <torch/optim/sgd.h>
#include <torch/types.h>

#include <optional>
#include <string>
#include <vector>

namespace fashion_mnist {

/// Writes `weights` (and `sgd` when given) into `dir`, creating it, then
/// the epoch file saying `epochs_done`. Thread: the training thread. Throws
/// tandem::IoError naming the file.
void SaveCheckpoint(const std::string& dir, int epochs_done,
                    const std::vector<torch::Tensor>& weights, torch::optim::SGD* sgd);

/// Reads the checkpoint in `dir` into `weights` (same shapes) and `sgd`
/// (when given and the checkpoint has one) and returns the epochs done.
/// Thread: the training thread. Throws tandem::IoError (no complete
/// checkpoint, unreadable file, a shape or count that differs from the
/// model's, naming the parameter).
int LoadCheckpoint(const std::string& dir, const std::vector<torch::Tensor>& weights,
                   torch::optim::SGD* sgd);

/// The path prefix the servers' optimizer states go to.
std::string KvOptimizerStatesPath(const std::string& dir);

}  // namespace fashion_mnist
