// Checkpoints of the main job (docs/training.md, "Checkpoints"): a
// directory holding
//
//   weights.ckpt            worker 0's weights and, when the workers run the
//                           optimizer, its SGD state (momentum), after the
//                           epochs it names; checksummed and written
//                           atomically (epoch_checkpoint_file.h)
//   kv-optimizer.server<r>  each server's optimizer states (KVStore's
//                           SaveOptimizerStates, written by the servers)
//
// Only the newest epoch's checkpoint is kept: a damaged one cannot be
// resumed from, and loading it says so, naming the file.
#pragma once

#include <torch/optim/sgd.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "resume_state.h"

namespace fashion_mnist {

/// Writes `weights` (and `sgd` when given) after `epochs_done` epochs and
/// `steps_done` steps of a job of `workers` workers into `dir`, creating
/// it. Thread: worker 0's training thread. Throws tandem::IoError naming the
/// file (no temporary file is left behind).
void SaveCheckpoint(const std::string& dir, int epochs_done, int64_t steps_done, int workers,
                    const std::vector<torch::Tensor>& weights, torch::optim::SGD* sgd);

/// Verifies the checkpoint in `dir` whole, then reads it into `weights`
/// (same shapes) and `sgd` (when given) and returns where it was taken
/// (steps done; epoch = epochs done; next step 0). Thread: the training
/// thread. Throws tandem::InvalidArgument naming the file and what was
/// expected and found (missing, damaged, truncated, another version or
/// worker count, a parameter's shape or an optimizer state the model lacks),
/// tandem::IoError when reading fails.
ResumeState LoadCheckpoint(const std::string& dir, int workers,
                           const std::vector<torch::Tensor>& weights, torch::optim::SGD* sgd);

/// The path prefix the servers' optimizer states go to.
std::string KvOptimizerStatesPath(const std::string& dir);

}  // namespace fashion_mnist
