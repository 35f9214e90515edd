// What a worker of the main job puts into a store checkpoint as its own
// bytes (KVStore::SaveCheckpoint's user_state; docs/training.md,
// "Checkpoints"): where it is in training and, when the workers run the
// optimizer, its weights and SGD state. Layout: u32 magic "FMRS", u16
// version 1, i64 steps done, i32 epoch, i64 next step within the epoch, u64
// length and the LibTorch archive of the local state (local_state.h; empty
// when the servers run the optimizer); little-endian. The per-epoch
// checkpoint file (epoch_checkpoint_file.h) carries the same bytes.
#pragma once

#include <cstdint>
#include <string>

namespace fashion_mnist {

/// Thread-safety: a plain value.
struct ResumeState {
  int64_t steps_done = 0;   ///< steps of the whole run so far
  int32_t epoch = 0;        ///< the epoch (0-based) the next step belongs to
  int64_t next_step = 0;    ///< the next step within that epoch
  std::string local_state;  ///< SaveLocalState's bytes, or empty
};

/// The bytes of `s`. Thread: any. Never throws.
std::string EncodeResumeState(const ResumeState& s);
/// Parses EncodeResumeState's bytes. Thread: any. Throws tandem::IoError
/// naming what is wrong (the file's checksum was verified before, so this
/// means another program's bytes).
ResumeState DecodeResumeState(const std::string& bytes);

}  // namespace fashion_mnist
