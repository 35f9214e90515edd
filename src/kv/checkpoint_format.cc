// Encoding and verification of checkpoint files (docs/checkpoints.md,
// "File format").
#include "kv/checkpoint_format.h"

#include <fmt/format.h>

#include <cstring>

#include "base/byte_io.h"
#include "base/dtype.h"
#include "net/crc32c.h"
#include "tandem/error.h"

namespace tandem::kv {
namespace {

// Limits a decoder enforces (docs/checkpoints.md, "Limits").
constexpr uint32_t kMaxRanks = 1u << 16;
constexpr uint32_t kMaxName = 256;
constexpr uint32_t kMaxFiles = 2 * kMaxRanks + 1;

uint32_t Crc(std::string_view bytes) {
  return net::Crc32c(std::as_bytes(std::span(bytes.data(), bytes.size())));
}

[[noreturn]] void Refuse(std::string_view file, const std::string& what) {
  throw IoError(fmt::format("checkpoint file {}: {}", file, what));
}

// Header (of `kind`), body, CRC32C over both.
std::string Envelope(CheckpointKind kind, const CheckpointHeader& h, const std::string& body) {
  base::ByteWriter w;
  w.Put(CheckpointHeader::kMagic);
  w.Put(CheckpointHeader::kVersion);
  w.Put(static_cast<uint8_t>(kind));
  w.Put(uint8_t{0});
  w.Put(h.round);
  w.Put(h.rank);
  w.Put(h.ranks);
  w.Put(static_cast<uint64_t>(body.size()));
  w.PutBytes(std::as_bytes(std::span(body.data(), body.size())));
  w.Put(Crc(w.bytes()));
  return w.Take();
}

struct Opened {
  CheckpointHeader header;
  std::string_view body;
};

Opened Open(std::string_view bytes, std::string_view file, std::optional<CheckpointKind> want) {
  constexpr size_t kMin = CheckpointHeader::kSize + CheckpointHeader::kTrailer;
  if (bytes.size() < kMin) {
    Refuse(file, fmt::format("truncated: {} bytes, a checkpoint file has at least {}", bytes.size(),
                             kMin));
  }
  base::ByteReader r(bytes.substr(0, CheckpointHeader::kSize), "checkpoint header");
  const auto magic = r.Get<uint32_t>("magic");
  if (magic != CheckpointHeader::kMagic) {
    Refuse(file, fmt::format("bad magic {:#010x} (expected {:#010x}): not a tandem checkpoint file",
                             magic, CheckpointHeader::kMagic));
  }
  const auto version = r.Get<uint16_t>("version");
  if (version != CheckpointHeader::kVersion) {
    Refuse(file, fmt::format("version {} (this build reads version {})", version,
                             CheckpointHeader::kVersion));
  }
  const auto kind = r.Get<uint8_t>("kind");
  if (kind < 1 || kind > 3) Refuse(file, fmt::format("unknown kind {}", kind));
  const auto reserved = r.Get<uint8_t>("reserved");
  if (reserved != 0) Refuse(file, fmt::format("reserved header byte is {}, expected 0", reserved));
  Opened o;
  o.header.kind = static_cast<CheckpointKind>(kind);
  o.header.round = r.Get<uint64_t>("round");
  o.header.rank = r.Get<uint32_t>("rank");
  o.header.ranks = r.Get<uint32_t>("ranks");
  const auto body_length = r.Get<uint64_t>("body length");
  const uint64_t holds = bytes.size() - kMin;
  if (body_length != holds) {
    Refuse(file, fmt::format("{}: the header says the body has {} bytes, the file holds {} ({} "
                             "bytes in all)",
                             body_length > holds ? "truncated" : "trailing bytes", body_length,
                             holds, bytes.size()));
  }
  uint32_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - CheckpointHeader::kTrailer, sizeof(stored));
  const uint32_t computed = Crc(bytes.substr(0, bytes.size() - CheckpointHeader::kTrailer));
  if (stored != computed) {
    Refuse(file, fmt::format("checksum mismatch (stored {:#010x}, computed {:#010x}): corrupt",
                             stored, computed));
  }
  if (want && o.header.kind != *want) {
    Refuse(file, fmt::format("holds a {}, expected a {}", CheckpointKindName(o.header.kind),
                             CheckpointKindName(*want)));
  }
  if (o.header.ranks == 0 || o.header.ranks > kMaxRanks) {
    Refuse(file, fmt::format("count of ranks {} is outside [1, {}]", o.header.ranks, kMaxRanks));
  }
  if (o.header.rank >= o.header.ranks) {
    Refuse(file, fmt::format("rank {} is not below the count of ranks {}", o.header.rank,
                             o.header.ranks));
  }
  o.body = bytes.substr(CheckpointHeader::kSize, body_length);
  return o;
}

std::string_view Blob(base::ByteReader& r, std::string_view field) {
  const auto n = r.Get<uint64_t>(field);
  if (n > r.remaining()) {
    throw ProtocolError(
        fmt::format("field '{}' claims {} bytes, {} left", field, n, r.remaining()));
  }
  const auto bytes = r.GetBytes(static_cast<size_t>(n), field);
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

void PutBlob(base::ByteWriter& w, std::string_view bytes) {
  w.Put(static_cast<uint64_t>(bytes.size()));
  w.PutBytes(std::as_bytes(std::span(bytes.data(), bytes.size())));
}

// Runs `decode` over the body; a field error becomes the file's error.
template <typename Decode>
void DecodeBody(std::string_view file, std::string_view body, Decode decode) {
  try {
    base::ByteReader r(body, "body");
    decode(r);
    r.ExpectEnd();
  } catch (const ProtocolError& e) {
    Refuse(file, e.what());
  }
}

// A file of `kind`: its header, then `body(reader, file)` over the body.
template <typename File, typename Body>
File DecodeFile(std::string_view bytes, std::string_view name, CheckpointKind kind, Body body) {
  const Opened o = Open(bytes, name, kind);
  File f;
  f.header = o.header;
  DecodeBody(name, o.body, [&](base::ByteReader& r) { body(r, f); });
  return f;
}

void CheckSlice(const SavedKey& k) {
  if (k.row_length == 0 || k.offset % k.row_length != 0 || k.count % k.row_length != 0 ||
      k.total_elements % k.row_length != 0) {
    throw ProtocolError(
        fmt::format("key {}: row length {} does not divide offset {}, count {} and total {}", k.key,
                    k.row_length, k.offset, k.count, k.total_elements));
  }
  if (k.offset > k.total_elements || k.count > k.total_elements - k.offset) {
    throw ProtocolError(fmt::format("key {}: slice [{}, {}) lies outside {} elements", k.key,
                                    k.offset, k.offset + k.count, k.total_elements));
  }
}

}  // namespace

std::string_view CheckpointKindName(CheckpointKind kind) {
  switch (kind) {
    case CheckpointKind::kServer:
      return "server shard";
    case CheckpointKind::kWorker:
      return "worker state";
    case CheckpointKind::kManifest:
      return "manifest";
  }
  return "unknown kind";
}

std::string EncodeServerCheckpoint(const ServerCheckpoint& c) {
  base::ByteWriter w;
  w.Put(static_cast<uint8_t>(c.optimizer_name ? 1 : 0));
  if (c.optimizer_name) {
    w.PutString(*c.optimizer_name);
    PutBlob(w, c.optimizer_states);
  }
  w.Put(static_cast<uint64_t>(c.keys.size()));
  for (const SavedKey& k : c.keys) {
    w.Put(k.key);
    w.Put(static_cast<uint8_t>(k.dtype));
    w.Put(k.total_elements);
    w.Put(k.offset);
    w.Put(k.count);
    w.Put(k.row_length);
    PutBlob(w, k.value);
  }
  return Envelope(CheckpointKind::kServer, c.header, w.Take());
}

ServerCheckpoint DecodeServerCheckpoint(std::string_view bytes, std::string_view file) {
  return DecodeFile<ServerCheckpoint>(
      bytes, file, CheckpointKind::kServer, [&](base::ByteReader& r, ServerCheckpoint& c) {
        if (r.Get<bool>("has optimizer")) {
          c.optimizer_name = r.GetString("optimizer name", kMaxName);
          c.optimizer_states = std::string(Blob(r, "optimizer states"));
        }
        const auto keys = r.Get<uint64_t>("key count");
        // Each key takes at least 49 bytes: a count beyond that is a lie.
        if (keys > r.remaining() / 49) {
          throw ProtocolError(
              fmt::format("key count {} cannot fit in {} bytes", keys, r.remaining()));
        }
        for (uint64_t i = 0; i < keys; ++i) {
          SavedKey k;
          k.key = r.Get<uint64_t>("key");
          if (!c.keys.empty() && k.key <= c.keys.back().key) {
            throw ProtocolError(
                fmt::format("key {} follows key {}: keys must ascend", k.key, c.keys.back().key));
          }
          k.dtype = base::DTypeFromWire(r.Get<uint8_t>("dtype"));
          k.total_elements = r.Get<uint64_t>("total elements");
          k.offset = r.Get<uint64_t>("offset");
          k.count = r.Get<uint64_t>("count");
          k.row_length = r.Get<uint64_t>("row length");
          CheckSlice(k);
          k.value = std::string(Blob(r, "value"));
          const size_t elem = ElementSize(k.dtype);
          if (k.count > k.value.size() / elem || k.value.size() != k.count * elem) {
            throw ProtocolError(fmt::format("key {}: value holds {} bytes, {} {} elements need {}",
                                            k.key, k.value.size(), k.count,
                                            base::DTypeName(k.dtype), k.count * elem));
          }
          c.keys.push_back(std::move(k));
        }
      });
}

std::string EncodeWorkerCheckpoint(const WorkerCheckpoint& c) {
  base::ByteWriter w;
  PutBlob(w, c.user_state);
  w.Put(static_cast<uint64_t>(c.residuals.size()));
  for (const SavedResidual& s : c.residuals) {
    w.Put(s.key);
    w.Put(static_cast<uint64_t>(s.values.size()));
    w.PutBytes(std::as_bytes(std::span(s.values)));
  }
  return Envelope(CheckpointKind::kWorker, c.header, w.Take());
}

WorkerCheckpoint DecodeWorkerCheckpoint(std::string_view bytes, std::string_view file) {
  return DecodeFile<WorkerCheckpoint>(
      bytes, file, CheckpointKind::kWorker, [&](base::ByteReader& r, WorkerCheckpoint& c) {
        c.user_state = std::string(Blob(r, "user state"));
        const auto count = r.Get<uint64_t>("residual count");
        if (count > r.remaining() / 16) {
          throw ProtocolError(
              fmt::format("residual count {} cannot fit in {} bytes", count, r.remaining()));
        }
        for (uint64_t i = 0; i < count; ++i) {
          SavedResidual s;
          s.key = r.Get<uint64_t>("residual key");
          if (!c.residuals.empty() && s.key <= c.residuals.back().key) {
            throw ProtocolError(fmt::format("residual of key {} follows key {}: keys must ascend",
                                            s.key, c.residuals.back().key));
          }
          const auto n = r.Get<uint64_t>("residual length");
          if (n > r.remaining() / sizeof(float)) {
            throw ProtocolError(fmt::format("key {}: residual of {} floats, {} bytes left", s.key,
                                            n, r.remaining()));
          }
          const auto raw = r.GetBytes(static_cast<size_t>(n) * sizeof(float), "residual");
          s.values.resize(static_cast<size_t>(n));
          if (n) std::memcpy(s.values.data(), raw.data(), raw.size());
          c.residuals.push_back(std::move(s));
        }
      });
}

std::string EncodeManifest(const CheckpointManifest& m) {
  base::ByteWriter w;
  w.Put(m.num_servers);
  w.Put(m.num_workers);
  w.Put(static_cast<uint32_t>(m.files.size()));
  for (const ManifestEntry& f : m.files) {
    w.PutString(f.name);
    w.Put(f.size);
    w.Put(f.crc32c);
  }
  return Envelope(CheckpointKind::kManifest, m.header, w.Take());
}

CheckpointManifest DecodeManifest(std::string_view bytes, std::string_view file) {
  return DecodeFile<CheckpointManifest>(
      bytes, file, CheckpointKind::kManifest, [&](base::ByteReader& r, CheckpointManifest& m) {
        m.num_servers = r.Get<uint32_t>("server count");
        m.num_workers = r.Get<uint32_t>("worker count");
        if (m.num_servers == 0 || m.num_servers > kMaxRanks || m.num_workers == 0 ||
            m.num_workers > kMaxRanks) {
          throw ProtocolError(fmt::format("{} servers and {} workers: each must be in [1, {}]",
                                          m.num_servers, m.num_workers, kMaxRanks));
        }
        if (m.num_workers != m.header.ranks) {
          throw ProtocolError(
              fmt::format("worker count {} differs from the header's count of ranks {}",
                          m.num_workers, m.header.ranks));
        }
        const auto files = r.Get<uint32_t>("file count");
        if (files > kMaxFiles) {
          throw ProtocolError(fmt::format("file count {} exceeds {}", files, kMaxFiles));
        }
        for (uint32_t i = 0; i < files; ++i) {
          ManifestEntry f;
          f.name = r.GetString("file name", kMaxName);
          if (f.name.empty() || f.name.find('/') != std::string::npos || f.name == "." ||
              f.name == "..") {
            throw ProtocolError(fmt::format("file name '{}' is not a plain name", f.name));
          }
          f.size = r.Get<uint64_t>("file size");
          f.crc32c = r.Get<uint32_t>("file crc32c");
          m.files.push_back(std::move(f));
        }
      });
}

CheckpointHeader DecodeCheckpointHeader(std::string_view bytes, std::string_view file) {
  return Open(bytes, file, std::nullopt).header;
}

}  // namespace tandem::kv
