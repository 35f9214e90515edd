#include "checkpoint.h"

#include <fmt/format.h>

#include <filesystem>

#include "epoch_checkpoint_file.h"
#include "local_state.h"
#include "tandem/error.h"

namespace fashion_mnist {

std::string KvOptimizerStatesPath(const std::string& dir) {
  return (std::filesystem::path(dir) / "kv-optimizer").string();
}

void SaveCheckpoint(const std::string& dir, int epochs_done, int64_t steps_done, int workers,
                    const std::vector<torch::Tensor>& weights, torch::optim::SGD* sgd) {
  ResumeState state;
  state.steps_done = steps_done;
  state.epoch = epochs_done;
  state.next_step = 0;
  state.local_state = SaveLocalState(weights, sgd);
  WriteEpochCheckpoint(dir, state, static_cast<uint32_t>(workers));
}

ResumeState LoadCheckpoint(const std::string& dir, int workers,
                           const std::vector<torch::Tensor>& weights, torch::optim::SGD* sgd) {
  ResumeState state = ReadEpochCheckpoint(dir, static_cast<uint32_t>(workers));
  try {
    LoadLocalState(state.local_state, weights, sgd);
  } catch (const tandem::IoError& e) {
    // The checksum held, so these are another model's or options' bytes.
    throw tandem::InvalidArgument(
        fmt::format("checkpoint file {}: {} (resume with the options "
                    "that wrote it)",
                    EpochCheckpointPath(dir), e.what()));
  }
  state.local_state.clear();
  return state;
}

}  // namespace fashion_mnist
