// The main job's per-epoch checkpoint file, DIR/weights.ckpt (docs/training.md,
// "Checkpoints"): worker 0's weights and, when the workers run the
// optimizer, its LibTorch SGD state after a completed epoch. The example
// keeps only the newest one.
//
// The file reuses the store checkpoint's envelope (docs/checkpoints.md,
// "File format"): a worker-state file (kind 2) whose header says round =
// steps done, rank 0, ranks = the job's workers, and whose user state is a
// resume state (resume_state.h: steps done, epoch = epochs done, next step
// 0, and the local state archive, local_state.h); no residuals. The CRC32C
// over header and body catches any damaged byte, and the body length a
// truncation. It is written like the store's files: "weights.ckpt.tmp" in
// the same directory, fsync, rename, fsync of the directory; a failed write
// removes the temporary file.
//
// This layer knows bytes only (no LibTorch), so that fashion_mnist_tests can
// damage the file in every way without a model; checkpoint.h puts tensors in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kv/checkpoint_format.h"
#include "resume_state.h"

namespace fashion_mnist {

/// The file's name inside the checkpoint directory.
inline constexpr const char* kEpochCheckpointName = "weights.ckpt";

/// "<dir>/weights.ckpt".
std::string EpochCheckpointPath(const std::string& dir);

/// The file's contents for `state` as written by a job of `workers`
/// workers, before encoding (tests vary them to make well-formed files of
/// another job). Thread: any. Never throws.
tandem::kv::WorkerCheckpoint EpochCheckpointContents(const ResumeState& state, uint32_t workers);

/// Writes `state` (epoch = epochs done, next_step 0) as written by a job of
/// `workers` workers, atomically and durably. Thread: worker 0's training
/// thread. Throws tandem::InvalidArgument when `state` is not an epoch's end,
/// tandem::IoError naming the file and the failed call (no temporary file
/// is left behind).
void WriteEpochCheckpoint(const std::string& dir, const ResumeState& state, uint32_t workers);

/// Reads and verifies the whole file before returning anything: envelope
/// (size, magic, version, kind, body length, CRC32C), resume state, and that
/// it was written at an epoch's end by a job of `workers` workers. Thread:
/// the training thread. Throws tandem::InvalidArgument naming the file, what
/// was expected and what was found (missing, damaged, truncated, another
/// version or another job's file: the same on every attempt, so exit code
/// 78, docs/deploy.md), tandem::IoError when reading fails.
ResumeState ReadEpochCheckpoint(const std::string& dir, uint32_t workers);

/// Removes the temporary files that a killed or failed earlier save of this
/// example left in `dir`: "weights.ckpt.tmp" and the earlier version's
/// "weights.pt.tmp", "worker-sgd.pt.tmp" and "epoch.tmp"; nothing else (the
/// servers' and the store's files are theirs). Returns the paths removed.
/// Thread: worker 0's training thread, before it saves. Throws
/// tandem::IoError naming a file that cannot be removed.
std::vector<std::string> RemoveStaleCheckpointTemporaries(const std::string& dir);

}  // namespace fashion_mnist
