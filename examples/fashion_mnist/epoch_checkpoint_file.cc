#include "epoch_checkpoint_file.h"

#include <fmt/format.h>

#include <array>
#include <filesystem>
#include <system_error>

#include "kv/checkpoint_directory.h"
#include "kv/checkpoint_format.h"
#include "tandem/error.h"

namespace fashion_mnist {
namespace {

namespace fs = std::filesystem;

// What the earlier version of this example wrote (no checksum); its
// temporary files are still this example's to remove.
constexpr std::array<const char*, 3> kEarlierTemporaries = {"weights.pt.tmp", "worker-sgd.pt.tmp",
                                                            "epoch.tmp"};

// A checkpoint that cannot be used fails the same way on every attempt:
// InvalidArgument, exit code 78 (docs/deploy.md), not a retryable IoError.
[[noreturn]] void Unusable(const std::string& what) {
  throw tandem::InvalidArgument(
      fmt::format("{}; --resume cannot continue from it (the example keeps only its newest "
                  "per-epoch checkpoint): restore the file or start without --resume",
                  what));
}

}  // namespace

std::string EpochCheckpointPath(const std::string& dir) {
  return (fs::path(dir) / kEpochCheckpointName).string();
}

tandem::kv::WorkerCheckpoint EpochCheckpointContents(const ResumeState& state, uint32_t workers) {
  tandem::kv::WorkerCheckpoint file;
  file.header.kind = tandem::kv::CheckpointKind::kWorker;
  file.header.round = static_cast<uint64_t>(state.steps_done);
  file.header.rank = 0;
  file.header.ranks = workers;
  file.user_state = EncodeResumeState(state);
  return file;
}

void WriteEpochCheckpoint(const std::string& dir, const ResumeState& state, uint32_t workers) {
  if (state.epoch < 1 || state.next_step != 0 || state.steps_done < 0 || workers == 0) {
    throw tandem::InvalidArgument(fmt::format(
        "checkpoint file {}: an epoch checkpoint needs epochs done >= 1, next step 0, steps >= 0 "
        "and workers >= 1; got epoch {}, next step {}, steps {}, workers {}",
        EpochCheckpointPath(dir), state.epoch, state.next_step, state.steps_done, workers));
  }
  tandem::kv::WriteFileDurably(
      EpochCheckpointPath(dir),
      tandem::kv::EncodeWorkerCheckpoint(EpochCheckpointContents(state, workers)));
}

ResumeState ReadEpochCheckpoint(const std::string& dir, uint32_t workers) {
  const std::string path = EpochCheckpointPath(dir);
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    if (fs::exists(fs::path(dir) / "epoch", ec)) {
      Unusable(fmt::format(
          "checkpoint file {}: missing; {} holds an earlier version's checkpoint (weights.pt and "
          "epoch, without a checksum), which this version does not read",
          path, dir));
    }
    Unusable(fmt::format("no complete checkpoint in {} ({} is missing)", dir, path));
  }
  const std::string bytes = tandem::kv::ReadCheckpointFile(path);
  tandem::kv::WorkerCheckpoint file;
  try {
    file = tandem::kv::DecodeWorkerCheckpoint(bytes, path);
  } catch (const tandem::IoError& e) {
    Unusable(e.what());
  }
  ResumeState state;
  try {
    state = DecodeResumeState(file.user_state);
  } catch (const tandem::IoError& e) {
    Unusable(fmt::format("checkpoint file {}: {}", path, e.what()));
  }
  if (file.header.rank != 0 || file.header.ranks != workers) {
    Unusable(fmt::format(
        "checkpoint file {}: written by worker {} of a job of {} workers, expected worker 0 of "
        "{} (resume with the same number of workers)",
        path, file.header.rank, file.header.ranks, workers));
  }
  if (!file.residuals.empty()) {
    Unusable(fmt::format("checkpoint file {}: holds {} compression residuals, expected none", path,
                         file.residuals.size()));
  }
  if (static_cast<int64_t>(file.header.round) != state.steps_done || state.epoch < 1 ||
      state.next_step != 0) {
    Unusable(fmt::format(
        "checkpoint file {}: not an epoch's end (header round {}; resume state: {} steps, epoch "
        "{}, next step {}; expected the round to equal the steps, epoch >= 1 and next step 0)",
        path, file.header.round, state.steps_done, state.epoch, state.next_step));
  }
  return state;
}

std::vector<std::string> RemoveStaleCheckpointTemporaries(const std::string& dir) {
  std::vector<std::string> names = {std::string(kEpochCheckpointName) + ".tmp"};
  names.insert(names.end(), kEarlierTemporaries.begin(), kEarlierTemporaries.end());
  std::vector<std::string> removed;
  for (const std::string& name : names) {
    const fs::path path = fs::path(dir) / name;
    std::error_code ec;
    if (fs::remove(path, ec)) removed.push_back(path.string());
    if (ec) {
      throw tandem::IoError(
          fmt::format("remove stale temporary file {}: {}", path.string(), ec.message()));
    }
  }
  return removed;
}

}  // namespace fashion_mnist
