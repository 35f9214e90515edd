// The bytes of a store checkpoint's files: a server's shard, a worker's own
// state, and the manifest that makes a round count. docs/checkpoints.md,
// "File format", is the normative description (every field, its size and
// order); this file implements it. Reading and writing files, and choosing a
// round, is checkpoint_directory.h.
//
// Every file is an envelope: a 32-byte header (magic, version, kind, round,
// rank, count of ranks, body length), the body, and a CRC32C over both. A
// decoder verifies the whole envelope and the whole body before returning
// anything, and names the file and what was wrong when it refuses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/tensor.h"

namespace tandem::kv {

/// What a checkpoint file holds (the header's kind byte).
enum class CheckpointKind : uint8_t { kServer = 1, kWorker = 2, kManifest = 3 };

/// "server shard", "worker state", "manifest".
std::string_view CheckpointKindName(CheckpointKind kind);

/// The header of every checkpoint file.
struct CheckpointHeader {
  static constexpr uint32_t kMagic = 0x4B434454;  ///< "TDCK" as little-endian bytes
  static constexpr uint16_t kVersion = 1;
  static constexpr size_t kSize = 32;    ///< bytes before the body
  static constexpr size_t kTrailer = 4;  ///< the CRC32C after the body
  CheckpointKind kind = CheckpointKind::kServer;
  uint64_t round = 0;
  uint32_t rank = 0;   ///< the writer's rank among servers or workers (0 for a manifest)
  uint32_t ranks = 0;  ///< servers (server files) or workers (worker files, manifest)
};

/// One key slice a server held.
struct SavedKey {
  uint64_t key = 0;
  DType dtype = DType::kF32;
  uint64_t total_elements = 0;  ///< of the whole array
  uint64_t offset = 0;          ///< of this server's slice
  uint64_t count = 0;           ///< elements of the slice
  uint64_t row_length = 1;
  std::string value;  ///< count * ElementSize(dtype) bytes
};

/// A server's shard at a round.
struct ServerCheckpoint {
  CheckpointHeader header;
  /// The optimizer's name and kv::Optimizer::SaveStates() (states, update
  /// counts, schedule), absent when the servers ran none.
  std::optional<std::string> optimizer_name;
  std::string optimizer_states;
  std::vector<SavedKey> keys;  ///< ascending by key
};

/// Gradient compression's residual of one key on a worker.
struct SavedResidual {
  uint64_t key = 0;
  std::vector<float> values;
};

/// A worker's own state at a round.
struct WorkerCheckpoint {
  CheckpointHeader header;
  std::string user_state;  ///< the application's bytes, as given
  std::vector<SavedResidual> residuals;
};

/// One file a manifest vouches for.
struct ManifestEntry {
  std::string name;  ///< inside the round's directory, e.g. "server-0.ckpt"
  uint64_t size = 0;
  uint32_t crc32c = 0;  ///< of the whole file
};

/// The list of a round's files; written last.
struct CheckpointManifest {
  CheckpointHeader header;  ///< rank 0, ranks = workers
  uint32_t num_servers = 0;
  uint32_t num_workers = 0;
  std::vector<ManifestEntry> files;
};

/// Encoders. Any thread; never throw.
std::string EncodeServerCheckpoint(const ServerCheckpoint& c);
std::string EncodeWorkerCheckpoint(const WorkerCheckpoint& c);
std::string EncodeManifest(const CheckpointManifest& m);

/// Decoders: verify the envelope (size, magic, version, kind, body length,
/// CRC32C) and the whole body. `file` names the file in errors. Any thread.
/// Throw IoError "checkpoint file <file>: <what was wrong>".
ServerCheckpoint DecodeServerCheckpoint(std::string_view bytes, std::string_view file);
WorkerCheckpoint DecodeWorkerCheckpoint(std::string_view bytes, std::string_view file);
CheckpointManifest DecodeManifest(std::string_view bytes, std::string_view file);

/// Only the header, after verifying the envelope (not the body). Throws as
/// the decoders.
CheckpointHeader DecodeCheckpointHeader(std::string_view bytes, std::string_view file);

}  // namespace tandem::kv
