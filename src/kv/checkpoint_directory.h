// A store checkpoint directory on disk (docs/checkpoints.md, "Directory"
// and "Protocol"): dir/round-<R>/ holds server-<s>.ckpt for every server,
// worker-<w>.ckpt for every worker and, written last, MANIFEST. A round
// counts only once its MANIFEST is there and every file it lists verifies.
//
// Every file is written atomically and durably: a temporary file in the same
// directory, fsync, rename over the final name, fsync of the directory.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kv/checkpoint_format.h"

namespace tandem::kv {

/// "<dir>/round-<round>".
std::string CheckpointRoundDir(const std::string& dir, uint64_t round);
/// "server-<rank>.ckpt", "worker-<rank>.ckpt", "MANIFEST".
std::string ServerCheckpointName(uint32_t rank);
std::string WorkerCheckpointName(uint32_t rank);
inline constexpr const char* kManifestName = "MANIFEST";

/// Writes `bytes` to `path` atomically and durably (temporary file, fsync,
/// rename, fsync of the directory), creating the directories above it.
/// The temporary file is "<path>.tmp"; a failure removes it before the
/// error propagates. Any thread. Throws IoError naming the path and the
/// failed call.
void WriteFileDurably(const std::string& path, std::string_view bytes);

/// The whole file. Any thread. Throws IoError "checkpoint file <path>:
/// missing" or naming the failed call.
std::string ReadCheckpointFile(const std::string& path);

/// The rounds that have a directory in `dir` (complete or not), newest
/// first. An absent `dir` has none. Any thread. Throws IoError when `dir`
/// cannot be listed.
std::vector<uint64_t> ListCheckpointRounds(const std::string& dir);

/// Reads round `round` of `dir` completely and checks it: the manifest,
/// then every file it lists (present, of the listed size and CRC32C, a
/// valid file of the right kind, round, rank and count of ranks), and that
/// it lists exactly one file per server and per worker. Returns the
/// manifest. Any thread. Throws IoError naming the first bad file and what
/// was wrong with it.
CheckpointManifest VerifyCheckpointRound(const std::string& dir, uint64_t round);

/// The manifest of the newest round of `dir` that VerifyCheckpointRound
/// accepts; each round refused on the way is reported to `refused(round,
/// reason)` (a round without a manifest is reported too: an interrupted
/// save). nullopt when no round has a manifest. Any thread. Throws IoError
/// when manifests exist but no round verifies, listing every refusal.
std::optional<CheckpointManifest> FindNewestConsistentRound(
    const std::string& dir, const std::function<void(uint64_t, const std::string&)>& refused);

/// Verifies every server and worker file of round `round` and writes its
/// MANIFEST (durably). Any thread. Throws IoError naming a missing or bad
/// file; then no manifest is written.
void WriteCheckpointManifest(const std::string& dir, uint64_t round, uint32_t num_servers,
                             uint32_t num_workers);

/// Removes every round directory older than the `keep` newest complete
/// rounds (complete: with a MANIFEST; the incomplete ones in between go
/// too). Any thread. Returns the rounds removed. Throws IoError.
std::vector<uint64_t> PruneCheckpointRounds(const std::string& dir, size_t keep);

}  // namespace tandem::kv
