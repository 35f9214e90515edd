#include "cluster/cluster_messages.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "base/byte_io.h"
#include "tandem/error.h"

namespace tandem {

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kScheduler:
      return "scheduler";
    case Role::kServer:
      return "server";
    case Role::kWorker:
      return "worker";
  }
  return "unknown-role";
}

std::string NodeInfo::ToString() const {
  std::string address = host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                                            : fmt::format("{}:{}", host, port);
  if (role == Role::kScheduler) return fmt::format("scheduler (node {}, {})", id, address);
  return fmt::format("{} {} (node {}, {})", RoleName(role), rank, id, address);
}

namespace cluster {
namespace {

// Hosts are DNS names or IP literals; 255 bytes is DNS's own limit.
constexpr uint32_t kMaxHostBytes = 255;
constexpr uint32_t kMaxTextBytes = 64 * 1024;
// Far above any real job, small enough that a hostile count cannot make us
// reserve much before the reads themselves fail on truncation.
constexpr int32_t kMaxNodes = 1 << 20;

Role DecodeRole(uint8_t raw, const char* what) {
  if (raw > static_cast<uint8_t>(Role::kWorker)) {
    throw ProtocolError(fmt::format("{}: unknown role value {}", what, raw));
  }
  return static_cast<Role>(raw);
}

void PutNode(base::ByteWriter& w, const NodeInfo& n) {
  w.Put<int32_t>(n.id);
  w.Put<uint8_t>(static_cast<uint8_t>(n.role));
  w.Put<int32_t>(n.rank);
  w.PutString(n.host);
  w.Put<uint16_t>(n.port);
}

NodeInfo GetNode(base::ByteReader& r, const char* what) {
  NodeInfo n;
  n.id = r.Get<int32_t>("id");
  n.role = DecodeRole(r.Get<uint8_t>("role"), what);
  n.rank = r.Get<int32_t>("rank");
  n.host = r.GetString("host", kMaxHostBytes);
  n.port = r.Get<uint16_t>("port");
  return n;
}

}  // namespace

std::string RegisterRequest::Encode() const {
  base::ByteWriter w;
  w.Put<uint8_t>(static_cast<uint8_t>(role));
  w.Put<int32_t>(requested_rank);
  w.PutString(host);
  w.Put<uint16_t>(port);
  w.Put<uint32_t>(pid);
  w.PutString(hostname);
  return w.Take();
}

RegisterRequest RegisterRequest::Decode(const std::string& meta) {
  base::ByteReader r(meta, "register request");
  RegisterRequest q;
  q.role = DecodeRole(r.Get<uint8_t>("role"), "register request");
  q.requested_rank = r.Get<int32_t>("requested_rank");
  q.host = r.GetString("host", kMaxHostBytes);
  q.port = r.Get<uint16_t>("port");
  q.pid = r.Get<uint32_t>("pid");
  q.hostname = r.GetString("hostname", kMaxHostBytes);
  r.ExpectEnd();
  if (q.requested_rank < -1) {
    throw ProtocolError(
        fmt::format("register request: requested rank {} is negative", q.requested_rank));
  }
  if (q.host.empty()) throw ProtocolError("register request: empty host");
  return q;
}

std::string NodeTable::Encode() const {
  base::ByteWriter w;
  w.Put<int32_t>(num_servers);
  w.Put<int32_t>(num_workers);
  w.Put<int32_t>(static_cast<int32_t>(nodes.size()));
  for (const auto& n : nodes) PutNode(w, n);
  return w.Take();
}

NodeTable NodeTable::Decode(const std::string& meta) {
  const char* what = "node table";
  base::ByteReader r(meta, what);
  NodeTable t;
  t.num_servers = r.Get<int32_t>("num_servers");
  t.num_workers = r.Get<int32_t>("num_workers");
  auto count = r.Get<int32_t>("count");
  if (t.num_servers < 0 || t.num_workers < 1 || count < 0 || count > kMaxNodes ||
      int64_t{count} != int64_t{t.num_servers} + t.num_workers + 1) {
    throw ProtocolError(
        fmt::format("node table: inconsistent counts ({} servers, {} workers, {} nodes listed)",
                    t.num_servers, t.num_workers, count));
  }
  std::vector<int> next_rank(3, 0);
  for (int32_t i = 0; i < count; ++i) {
    NodeInfo n = GetNode(r, what);
    if (n.id != i) {
      throw ProtocolError(fmt::format("node table: entry {} has id {}", i, n.id));
    }
    auto role_index = static_cast<size_t>(n.role);
    bool scheduler_slot = i == 0;
    if (scheduler_slot != (n.role == Role::kScheduler) || n.rank != next_rank[role_index]) {
      throw ProtocolError(fmt::format("node table: entry {} ({} rank {}) is out of order", i,
                                      RoleName(n.role), n.rank));
    }
    ++next_rank[role_index];
    t.nodes.push_back(std::move(n));
  }
  if (next_rank[1] != t.num_servers || next_rank[2] != t.num_workers) {
    throw ProtocolError(
        fmt::format("node table: lists {} servers and {} workers, header says {} and {}",
                    next_rank[1], next_rank[2], t.num_servers, t.num_workers));
  }
  r.ExpectEnd();
  return t;
}

std::string BarrierRequest::Encode() const {
  base::ByteWriter w;
  w.Put<uint8_t>(groups);
  w.Put<uint8_t>(flags);
  w.Put<uint64_t>(sequence);
  return w.Take();
}

BarrierRequest BarrierRequest::Decode(const std::string& meta) {
  base::ByteReader r(meta, "barrier request");
  BarrierRequest b;
  b.groups = r.Get<uint8_t>("groups");
  b.flags = r.Get<uint8_t>("flags");
  b.sequence = r.Get<uint64_t>("sequence");
  r.ExpectEnd();
  if (b.groups == 0 || (b.groups & ~group::kAll) != 0) {
    throw ProtocolError(fmt::format("barrier request: invalid group mask {}", b.groups));
  }
  if ((b.flags & ~(kFinal | kAdmit)) != 0) {
    throw ProtocolError(fmt::format("barrier request: unknown flags {:#x}", b.flags));
  }
  return b;
}

std::string BarrierFailure::Encode() const {
  base::ByteWriter w;
  w.Put<uint8_t>(timed_out ? 1 : 0);
  w.PutString(text.size() > kMaxTextBytes ? text.substr(0, kMaxTextBytes) : text);
  return w.Take();
}

BarrierFailure BarrierFailure::Decode(const std::string& meta) {
  base::ByteReader r(meta, "barrier failure");
  BarrierFailure f;
  auto kind = r.Get<uint8_t>("timed_out");
  if (kind > 1) throw ProtocolError(fmt::format("barrier failure: bad kind {}", kind));
  f.timed_out = kind == 1;
  f.text = r.GetString("text", kMaxTextBytes);
  r.ExpectEnd();
  return f;
}

std::string NodeLostNotice::Encode() const {
  base::ByteWriter w;
  PutNode(w, node);
  w.PutString(reason);
  return w.Take();
}

NodeLostNotice NodeLostNotice::Decode(const std::string& meta) {
  base::ByteReader r(meta, "node-lost notice");
  NodeLostNotice n;
  n.node = GetNode(r, "node-lost notice");
  n.reason = r.GetString("reason", kMaxTextBytes);
  r.ExpectEnd();
  return n;
}

std::string WorkerLeftNotice::Encode() const {
  base::ByteWriter w;
  w.Put(epoch);
  PutNode(w, node);
  w.PutString(reason);
  w.Put(static_cast<uint32_t>(remaining.size()));
  for (int32_t rank : remaining) w.Put(rank);
  return w.Take();
}

WorkerLeftNotice WorkerLeftNotice::Decode(const std::string& meta) {
  base::ByteReader r(meta, "worker-left notice");
  WorkerLeftNotice n;
  n.epoch = r.Get<uint32_t>("epoch");
  if (n.epoch == 0) throw ProtocolError("worker-left notice: epoch 0 (the first change is 1)");
  n.node = GetNode(r, "worker-left notice");
  if (n.node.role != Role::kWorker) {
    throw ProtocolError(
        fmt::format("worker-left notice names {}, which is not a worker", n.node.ToString()));
  }
  n.reason = r.GetString("reason", kMaxTextBytes);
  auto count = r.Get<uint32_t>("remaining worker count");
  if (count == 0 || count > static_cast<uint32_t>(kMaxNodes)) {
    throw ProtocolError(
        fmt::format("worker-left notice: {} remaining workers (must be 1..{})", count, kMaxNodes));
  }
  n.remaining.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    auto rank = r.Get<int32_t>("remaining worker rank");
    if (rank < 0 || (!n.remaining.empty() && rank <= n.remaining.back()) || rank == n.node.rank) {
      throw ProtocolError(fmt::format(
          "worker-left notice: remaining rank {} at position {} is negative, out of order, or "
          "the worker that left",
          rank, i));
    }
    n.remaining.push_back(rank);
  }
  r.ExpectEnd();
  return n;
}

namespace {

void PutRanks(base::ByteWriter& w, const std::vector<int32_t>& ranks) {
  w.Put(static_cast<uint32_t>(ranks.size()));
  for (int32_t rank : ranks) w.Put(rank);
}

// Ascending, non-negative, 1..kMaxNodes of them (0..kMaxNodes with
// `may_be_empty`).
std::vector<int32_t> GetRanks(base::ByteReader& r, const char* what, bool may_be_empty = false) {
  auto count = r.Get<uint32_t>("worker count");
  if ((count == 0 && !may_be_empty) || count > static_cast<uint32_t>(kMaxNodes)) {
    throw ProtocolError(fmt::format("{}: {} workers (must be {}..{})", what, count,
                                    may_be_empty ? 0 : 1, kMaxNodes));
  }
  std::vector<int32_t> ranks;
  ranks.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    auto rank = r.Get<int32_t>("worker rank");
    if (rank < 0 || (!ranks.empty() && rank <= ranks.back())) {
      throw ProtocolError(fmt::format(
          "{}: worker rank {} at position {} is negative or out of order", what, rank, i));
    }
    ranks.push_back(rank);
  }
  return ranks;
}

}  // namespace

std::string WorkerJoinedNotice::Encode() const {
  base::ByteWriter w;
  w.Put(epoch);
  PutNode(w, node);
  PutRanks(w, workers);
  return w.Take();
}

WorkerJoinedNotice WorkerJoinedNotice::Decode(const std::string& meta) {
  base::ByteReader r(meta, "worker-joined notice");
  WorkerJoinedNotice n;
  n.epoch = r.Get<uint32_t>("epoch");
  if (n.epoch == 0) throw ProtocolError("worker-joined notice: epoch 0 (the first change is 1)");
  n.node = GetNode(r, "worker-joined notice");
  if (n.node.role != Role::kWorker) {
    throw ProtocolError(
        fmt::format("worker-joined notice names {}, which is not a worker", n.node.ToString()));
  }
  n.workers = GetRanks(r, "worker-joined notice");
  r.ExpectEnd();
  if (!std::binary_search(n.workers.begin(), n.workers.end(), n.node.rank)) {
    throw ProtocolError(
        fmt::format("worker-joined notice: the members do not include {}", n.node.ToString()));
  }
  return n;
}

std::string Admission::Encode() const {
  base::ByteWriter w;
  w.PutString(table.Encode());
  w.Put(epoch);
  PutRanks(w, workers);
  w.Put(static_cast<uint32_t>(barriers.size()));
  for (const auto& [groups, passed] : barriers) {
    w.Put(groups);
    w.Put(passed);
  }
  PutRanks(w, joined_below_minimum);
  return w.Take();
}

Admission Admission::Decode(const std::string& meta) {
  base::ByteReader r(meta, "admission");
  Admission a;
  a.table = NodeTable::Decode(r.GetString("node table", static_cast<uint32_t>(meta.size())));
  a.epoch = r.Get<uint32_t>("epoch");
  a.workers = GetRanks(r, "admission");
  auto count = r.Get<uint32_t>("barrier count");
  if (count > static_cast<uint32_t>(group::kAll)) {
    throw ProtocolError(fmt::format("admission: {} barrier groups (at most {})", count,
                                    static_cast<int>(group::kAll)));
  }
  for (uint32_t i = 0; i < count; ++i) {
    auto groups = r.Get<uint8_t>("group mask");
    auto passed = r.Get<uint64_t>("barriers passed");
    if (groups == 0 || (groups & ~group::kAll) != 0) {
      throw ProtocolError(fmt::format("admission: invalid group mask {}", groups));
    }
    a.barriers.emplace_back(groups, passed);
  }
  a.joined_below_minimum =
      GetRanks(r, "admission's joiners below the minimum", /*may_be_empty=*/true);
  r.ExpectEnd();
  for (int32_t rank : a.workers) {
    if (rank >= a.table.num_workers) {
      throw ProtocolError(fmt::format("admission: worker rank {} of a job of {} workers", rank,
                                      a.table.num_workers));
    }
  }
  for (int32_t rank : a.joined_below_minimum) {
    if (!std::binary_search(a.workers.begin(), a.workers.end(), rank)) {
      throw ProtocolError(fmt::format(
          "admission: worker {} joined below the minimum but is not among the members [{}]", rank,
          fmt::join(a.workers, ",")));
    }
  }
  return a;
}

std::string JoinPendingNotice::Encode() const {
  base::ByteWriter w;
  w.Put(waiting);
  return w.Take();
}

JoinPendingNotice JoinPendingNotice::Decode(const std::string& meta) {
  base::ByteReader r(meta, "join-pending notice");
  JoinPendingNotice n;
  n.waiting = r.Get<uint32_t>("waiting");
  r.ExpectEnd();
  return n;
}

StopKind StopKindOf(const std::exception& error) noexcept {
  if (dynamic_cast<const InvalidArgument*>(&error)) return StopKind::kInvalidArgument;
  if (dynamic_cast<const ConfigError*>(&error)) return StopKind::kConfigError;
  if (dynamic_cast<const IoError*>(&error)) return StopKind::kIoError;
  if (dynamic_cast<const ProtocolError*>(&error)) return StopKind::kProtocolError;
  return StopKind::kError;
}

void ThrowStopKind(StopKind kind, const std::string& text) {
  switch (kind) {
    case StopKind::kInvalidArgument:
      throw InvalidArgument(text);
    case StopKind::kConfigError:
      throw ConfigError(text);
    case StopKind::kIoError:
      throw IoError(text);
    case StopKind::kProtocolError:
      throw ProtocolError(text);
    case StopKind::kError:
      break;
  }
  throw Error(text);
}

namespace {

StopKind DecodeStopKind(uint8_t raw, const char* what) {
  if (raw > static_cast<uint8_t>(StopKind::kLast)) {
    throw ProtocolError(fmt::format("{}: unknown error kind {}", what, raw));
  }
  return static_cast<StopKind>(raw);
}

}  // namespace

std::string JobStopRequest::Encode() const {
  base::ByteWriter w;
  w.Put<uint8_t>(static_cast<uint8_t>(kind));
  w.PutString(reason.size() > kMaxTextBytes ? reason.substr(0, kMaxTextBytes) : reason);
  return w.Take();
}

JobStopRequest JobStopRequest::Decode(const std::string& meta) {
  base::ByteReader r(meta, "job stop request");
  JobStopRequest q;
  q.kind = DecodeStopKind(r.Get<uint8_t>("kind"), "job stop request");
  q.reason = r.GetString("reason", kMaxTextBytes);
  r.ExpectEnd();
  return q;
}

std::string JobStoppedNotice::Encode() const {
  base::ByteWriter w;
  PutNode(w, node);
  w.Put<uint8_t>(static_cast<uint8_t>(kind));
  w.PutString(reason.size() > kMaxTextBytes ? reason.substr(0, kMaxTextBytes) : reason);
  return w.Take();
}

JobStoppedNotice JobStoppedNotice::Decode(const std::string& meta) {
  base::ByteReader r(meta, "job-stopped notice");
  JobStoppedNotice n;
  n.node = GetNode(r, "job-stopped notice");
  n.kind = DecodeStopKind(r.Get<uint8_t>("kind"), "job-stopped notice");
  n.reason = r.GetString("reason", kMaxTextBytes);
  r.ExpectEnd();
  return n;
}

std::string EncodeText(const std::string& text) {
  base::ByteWriter w;
  w.PutString(text.size() > kMaxTextBytes ? text.substr(0, kMaxTextBytes) : text);
  return w.Take();
}

std::string DecodeText(const std::string& meta, const char* what) {
  base::ByteReader r(meta, what);
  std::string text = r.GetString("text", kMaxTextBytes);
  r.ExpectEnd();
  return text;
}

bool InGroups(const NodeInfo& n, int groups) {
  switch (n.role) {
    case Role::kScheduler:
      return (groups & group::kScheduler) != 0;
    case Role::kServer:
      return (groups & group::kServers) != 0;
    case Role::kWorker:
      return (groups & group::kWorkers) != 0;
  }
  return false;
}

std::string GroupsName(int groups) {
  std::string out;
  auto add = [&](int bit, const char* name) {
    if ((groups & bit) == 0) return;
    if (!out.empty()) out += "+";
    out += name;
  };
  add(group::kScheduler, "scheduler");
  add(group::kServers, "servers");
  add(group::kWorkers, "workers");
  return out.empty() ? "none" : out;
}

}  // namespace cluster
}  // namespace tandem
