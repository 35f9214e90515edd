// A store checkpoint directory (docs/checkpoints.md, "Directory").
#include "kv/checkpoint_directory.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "net/crc32c.h"
#include "tandem/error.h"

namespace tandem::kv {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kRoundPrefix = "round-";

[[noreturn]] void Fail(std::string_view call, const std::string& target) {
  throw IoError(fmt::format("{} {}: {}", call, target, std::strerror(errno)));
}

void FsyncPath(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) Fail("open", path);
  if (::fsync(fd) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    Fail("fsync", path);
  }
  ::close(fd);
}

void CreateDirectories(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError(fmt::format("create directory {}: {}", dir.string(), ec.message()));
}

std::optional<uint64_t> RoundOf(const std::string& name) {
  if (!name.starts_with(kRoundPrefix)) return std::nullopt;
  const std::string_view digits = std::string_view(name).substr(kRoundPrefix.size());
  uint64_t round = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), round);
  if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty()) {
    return std::nullopt;
  }
  if (fmt::format("{}", round) != digits) return std::nullopt;  // no leading zeros or signs
  return round;
}

uint32_t CrcOf(const std::string& bytes) {
  return net::Crc32c(std::as_bytes(std::span(bytes.data(), bytes.size())));
}

// The header of a file of round `round` must say so.
void CheckHeader(const std::string& path, const CheckpointHeader& h, uint64_t round, uint32_t rank,
                 uint32_t ranks) {
  if (h.round != round || h.rank != rank || h.ranks != ranks) {
    throw IoError(fmt::format(
        "checkpoint file {}: header says round {} rank {} of {}, expected round {} rank {} of {}",
        path, h.round, h.rank, h.ranks, round, rank, ranks));
  }
}

// Reads and fully verifies the server and worker files of a round.
std::vector<ManifestEntry> VerifyFiles(const std::string& round_dir, uint64_t round,
                                       uint32_t num_servers, uint32_t num_workers) {
  std::vector<ManifestEntry> entries;
  for (uint32_t s = 0; s < num_servers; ++s) {
    const std::string name = ServerCheckpointName(s);
    const std::string path = round_dir + "/" + name;
    const std::string bytes = ReadCheckpointFile(path);
    CheckHeader(path, DecodeServerCheckpoint(bytes, path).header, round, s, num_servers);
    entries.push_back({name, bytes.size(), CrcOf(bytes)});
  }
  for (uint32_t w = 0; w < num_workers; ++w) {
    const std::string name = WorkerCheckpointName(w);
    const std::string path = round_dir + "/" + name;
    const std::string bytes = ReadCheckpointFile(path);
    CheckHeader(path, DecodeWorkerCheckpoint(bytes, path).header, round, w, num_workers);
    entries.push_back({name, bytes.size(), CrcOf(bytes)});
  }
  return entries;
}

}  // namespace

std::string CheckpointRoundDir(const std::string& dir, uint64_t round) {
  return fmt::format("{}/{}{}", dir, kRoundPrefix, round);
}

std::string ServerCheckpointName(uint32_t rank) { return fmt::format("server-{}.ckpt", rank); }
std::string WorkerCheckpointName(uint32_t rank) { return fmt::format("worker-{}.ckpt", rank); }

void WriteFileDurably(const std::string& path, std::string_view bytes) {
  const fs::path target(path);
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  CreateDirectories(parent);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) Fail("open", tmp);
  // A failed write removes the temporary file before throwing, so that a
  // full disk is left no fuller (docs/checkpoints.md, "Directory").
  const auto fail = [&tmp](std::string_view call, const std::string& target, int open_fd) {
    const int saved = errno;
    if (open_fd >= 0) ::close(open_fd);
    ::unlink(tmp.c_str());
    errno = saved;
    Fail(call, target);
  };
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write", tmp, fd);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail("fsync", tmp, fd);
  if (::close(fd) != 0) fail("close", tmp, -1);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail(fmt::format("rename {} to", tmp), path, -1);
  FsyncPath(parent.string(), O_RDONLY | O_DIRECTORY);
}

std::string ReadCheckpointFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) throw IoError(fmt::format("checkpoint file {}: missing", path));
    Fail("open", path);
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) Fail("read", path);
  return bytes;
}

std::vector<uint64_t> ListCheckpointRounds(const std::string& dir) {
  std::vector<uint64_t> rounds;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return rounds;
  fs::directory_iterator it(dir, ec);
  if (ec) throw IoError(fmt::format("list checkpoint directory {}: {}", dir, ec.message()));
  for (const fs::directory_entry& e : it) {
    if (!e.is_directory(ec)) continue;
    if (auto r = RoundOf(e.path().filename().string())) rounds.push_back(*r);
  }
  std::sort(rounds.rbegin(), rounds.rend());
  return rounds;
}

CheckpointManifest VerifyCheckpointRound(const std::string& dir, uint64_t round) {
  const std::string round_dir = CheckpointRoundDir(dir, round);
  const std::string manifest_path = round_dir + "/" + kManifestName;
  const CheckpointManifest m = DecodeManifest(ReadCheckpointFile(manifest_path), manifest_path);
  CheckHeader(manifest_path, m.header, round, 0, m.num_workers);
  std::set<std::string> expected;
  for (uint32_t s = 0; s < m.num_servers; ++s) expected.insert(ServerCheckpointName(s));
  for (uint32_t w = 0; w < m.num_workers; ++w) expected.insert(WorkerCheckpointName(w));
  std::set<std::string> listed;
  for (const ManifestEntry& f : m.files) {
    if (!expected.contains(f.name) || !listed.insert(f.name).second) {
      throw IoError(
          fmt::format("checkpoint file {}: lists '{}', which a round of {} servers and "
                      "{} workers does not have (or lists it twice)",
                      manifest_path, f.name, m.num_servers, m.num_workers));
    }
  }
  if (listed.size() != expected.size()) {
    throw IoError(
        fmt::format("checkpoint file {}: lists {} files, a round of {} servers and {} "
                    "workers has {}",
                    manifest_path, listed.size(), m.num_servers, m.num_workers, expected.size()));
  }
  const std::vector<ManifestEntry> found =
      VerifyFiles(round_dir, round, m.num_servers, m.num_workers);
  for (const ManifestEntry& f : found) {
    const auto listed_entry = std::find_if(
        m.files.begin(), m.files.end(), [&](const ManifestEntry& e) { return e.name == f.name; });
    if (listed_entry->size != f.size || listed_entry->crc32c != f.crc32c) {
      throw IoError(fmt::format(
          "checkpoint file {}/{}: {} bytes with CRC32C {:#010x}, the manifest lists {} bytes with "
          "{:#010x}: changed after the round was written",
          round_dir, f.name, f.size, f.crc32c, listed_entry->size, listed_entry->crc32c));
    }
  }
  return m;
}

std::optional<CheckpointManifest> FindNewestConsistentRound(
    const std::string& dir, const std::function<void(uint64_t, const std::string&)>& refused) {
  std::vector<std::string> refusals;
  bool any_manifest = false;
  for (uint64_t round : ListCheckpointRounds(dir)) {
    const bool has_manifest = fs::exists(CheckpointRoundDir(dir, round) + "/" + kManifestName);
    any_manifest = any_manifest || has_manifest;
    try {
      if (!has_manifest) {
        throw IoError(
            fmt::format("round {} has no {}: its save did not complete", round, kManifestName));
      }
      return VerifyCheckpointRound(dir, round);
    } catch (const IoError& e) {
      if (refused) refused(round, e.what());
      if (has_manifest) refusals.push_back(fmt::format("round {}: {}", round, e.what()));
    }
  }
  if (!any_manifest) return std::nullopt;
  std::string text;
  for (const std::string& r : refusals) text += "; " + r;
  throw IoError(fmt::format("no consistent checkpoint round in {}{}", dir, text));
}

void WriteCheckpointManifest(const std::string& dir, uint64_t round, uint32_t num_servers,
                             uint32_t num_workers) {
  const std::string round_dir = CheckpointRoundDir(dir, round);
  CheckpointManifest m;
  m.header.kind = CheckpointKind::kManifest;
  m.header.round = round;
  m.header.rank = 0;
  m.header.ranks = num_workers;
  m.num_servers = num_servers;
  m.num_workers = num_workers;
  m.files = VerifyFiles(round_dir, round, num_servers, num_workers);
  WriteFileDurably(round_dir + "/" + kManifestName, EncodeManifest(m));
}

std::vector<uint64_t> PruneCheckpointRounds(const std::string& dir, size_t keep) {
  const std::vector<uint64_t> rounds = ListCheckpointRounds(dir);
  size_t complete = 0;
  std::optional<uint64_t> oldest_kept;
  for (uint64_t round : rounds) {
    if (complete == keep) break;
    if (fs::exists(CheckpointRoundDir(dir, round) + "/" + kManifestName)) {
      ++complete;
      oldest_kept = round;
    }
  }
  std::vector<uint64_t> removed;
  if (complete < keep || !oldest_kept) return removed;
  for (uint64_t round : rounds) {
    if (round >= *oldest_kept) continue;
    const std::string path = CheckpointRoundDir(dir, round);
    // The manifest goes first, so a crash half-way leaves an incomplete
    // round, never one that claims files it no longer has.
    std::error_code ec;
    fs::remove(path + "/" + kManifestName, ec);
    fs::remove_all(path, ec);
    if (ec) throw IoError(fmt::format("remove {}: {}", path, ec.message()));
    removed.push_back(round);
  }
  if (!removed.empty()) FsyncPath(dir, O_RDONLY | O_DIRECTORY);
  return removed;
}

}  // namespace tandem::kv
