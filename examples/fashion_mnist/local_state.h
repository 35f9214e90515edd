// A worker's own training state as one LibTorch archive: its weights
// ("weight0", "weight1", ... in parameter order) and, when the workers run
// the optimizer, LibTorch SGD's state ("sgd"). Carried inside a resume state
// (resume_state.h) in the store checkpoint and the per-epoch checkpoint.
#pragma once

#include <torch/optim/sgd.h>
#include <torch/types.h>

#include <string>
#include <vector>

namespace fashion_mnist {

/// `weights` and, when given, `sgd` as one LibTorch archive. Thread: the
/// training thread. Throws tandem::IoError.
std::string SaveLocalState(const std::vector<torch::Tensor>& weights, torch::optim::SGD* sgd);

/// Restores what SaveLocalState saved into `weights` (same shapes) and
/// `sgd` (when given; the archive must then hold one). Thread: the training
/// thread. Throws tandem::IoError naming a parameter whose shape differs or
/// a part the archive lacks.
void LoadLocalState(const std::string& bytes, const std::vector<torch::Tensor>& weights,
                    torch::optim::SGD* sgd);

}  // namespace fashion_mnist
