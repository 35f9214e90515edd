#include "collective/call_description.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <bit>
#include <cstring>
#include <map>

#include "base/byte_io.h"
#include "base/dtype.h"
#include "tandem/collective.h"
#include "tandem/error.h"

namespace tandem::collective {

namespace {

// Limits of the decoder: a description is small, and nothing it claims is
// allocated before it is checked against these.
constexpr uint32_t kMaxCounts = 1u << 16;
// The framework engine names a fusion buffer after every tensor in it.
constexpr uint32_t kMaxName = 256u << 10;
constexpr uint32_t kMaxDims = 64;
constexpr uint32_t kMaxNoticeText = 16384;
constexpr uint32_t kMaxNoticeDescription = 1u << 20;

std::string Dims(const std::vector<int64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

// "rank 0", "ranks 1-2", "ranks 0, 2, 4".
std::string RankList(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return fmt::format("rank {}", ranks[0]);
  bool consecutive = true;
  for (size_t i = 1; i < ranks.size(); ++i)
    consecutive = consecutive && ranks[i] == ranks[i - 1] + 1;
  if (consecutive) return fmt::format("ranks {}-{}", ranks.front(), ranks.back());
  return fmt::format("ranks {}", fmt::join(ranks, ", "));
}

bool HasReduction(CallKind k) { return k == CallKind::kAllReduce || k == CallKind::kReduceScatter; }

std::string ReductionText(uint8_t r) {
  try {
    return ReductionName(static_cast<Reduction>(r));
  } catch (const Error&) {
    return fmt::format("reduction {}", r);
  }
}

std::string ShapeText(const CallDescription& d) {
  return d.shape.empty() ? fmt::format("[{}]", d.count) : Dims(d.shape);
}

}  // namespace

const char* CallKindName(CallKind kind) {
  switch (kind) {
    case CallKind::kAllReduce:
      return "allreduce";
    case CallKind::kBroadcast:
      return "broadcast";
    case CallKind::kAllGather:
      return "allgather";
    case CallKind::kReduceScatter:
      return "reduce_scatter";
    case CallKind::kAllToAll:
      return "alltoall";
    case CallKind::kBarrier:
      return "barrier";
  }
  return "unknown operation";
}

namespace {

// The fingerprint: FNV-1a's step taken a 64-bit little-endian word at a
// time (the last word zero-padded, the length folded in last), each
// multiply followed by a shift that brings the high bits down. Every step is
// a bijection of the running hash, so encodings of one length that differ
// in one word never collide. 8 times fewer dependent multiplies than
// FNV-1a over bytes; never 0.
uint64_t WordHash(std::string_view bytes) {
  auto step = [](uint64_t h, uint64_t word) {
    h ^= word;
    h *= 1099511628211ULL;
    return h ^ (h >> 32);
  };
  auto load = [&](size_t at, size_t n) {
    uint64_t word = 0;
    std::memcpy(&word, bytes.data() + at, n);
    if constexpr (std::endian::native == std::endian::big) word = __builtin_bswap64(word);
    return word;
  };
  uint64_t h = 14695981039346656037ULL;
  size_t at = 0;
  for (; at + 8 <= bytes.size(); at += 8) h = step(h, load(at, 8));
  if (at < bytes.size()) h = step(h, load(at, bytes.size() - at));
  h = step(h, bytes.size());
  return h == 0 ? 1 : h;
}

}  // namespace

uint64_t CallDescription::EncodeInto(std::string& encoding) const {
  // Every field but the shape, in wire order (what the fingerprint covers),
  // then the shape; sized once and written in place, as an operation does
  // this as it begins.
  constexpr size_t kFixed = 4 * 1 + 4 + 4 * 8;  // kind..algorithm, root, count..postscale
  const size_t core = kFixed + 4 + 8 * counts.size() + 4 + name.size();
  encoding.resize(core + 4 + 8 * shape.size());
  char* at = encoding.data();
  auto put = [&at](auto value) {
    std::memcpy(at, &value, sizeof(value));  // little-endian hosts, as base::ByteWriter
    at += sizeof(value);
  };
  put(static_cast<uint8_t>(kind));
  put(static_cast<uint8_t>(dtype));
  put(reduction);
  put(algorithm);
  put(root);
  put(count);
  put(segment_bytes);
  put(std::bit_cast<uint64_t>(prescale));
  put(std::bit_cast<uint64_t>(postscale));
  put(static_cast<uint32_t>(counts.size()));
  for (int64_t c : counts) put(c);
  put(static_cast<uint32_t>(name.size()));
  if (!name.empty()) std::memcpy(at, name.data(), name.size());
  at += name.size();
  put(static_cast<uint32_t>(shape.size()));
  for (int64_t d : shape) put(d);
  return WordHash(std::string_view(encoding).substr(0, core));
}

std::string CallDescription::Encode() const {
  std::string encoding;
  EncodeInto(encoding);
  return encoding;
}

CallDescription CallDescription::Decode(const std::string& bytes) {
  base::ByteReader r(bytes, "collective call description");
  CallDescription d;
  const auto kind = r.Get<uint8_t>("kind");
  if (kind < static_cast<uint8_t>(CallKind::kAllReduce) ||
      kind > static_cast<uint8_t>(CallKind::kBarrier)) {
    throw ProtocolError(
        fmt::format("collective call description: kind {} is not an operation (1-6)", kind));
  }
  d.kind = static_cast<CallKind>(kind);
  const auto dtype = r.Get<uint8_t>("dtype");
  if (dtype > static_cast<uint8_t>(DType::kU8)) {
    throw ProtocolError(
        fmt::format("collective call description: dtype {} is not a tandem dtype (0-6)", dtype));
  }
  d.dtype = static_cast<DType>(dtype);
  d.reduction = r.Get<uint8_t>("reduction");
  d.algorithm = r.Get<uint8_t>("algorithm");
  d.root = r.Get<int32_t>("root");
  d.count = r.Get<uint64_t>("count");
  d.segment_bytes = r.Get<uint64_t>("segment bytes");
  d.prescale = std::bit_cast<double>(r.Get<uint64_t>("prescale"));
  d.postscale = std::bit_cast<double>(r.Get<uint64_t>("postscale"));
  auto bounded = [&](std::string_view field, uint32_t limit, size_t element) {
    const auto n = r.Get<uint32_t>(field);
    if (n > limit || n * element > r.remaining()) {
      throw ProtocolError(
          fmt::format("collective call description: {} claims {} entries (limit {}, {} bytes left)",
                      field, n, limit, r.remaining()));
    }
    return n;
  };
  const uint32_t counts = bounded("counts", kMaxCounts, 8);
  d.counts.reserve(counts);
  for (uint32_t i = 0; i < counts; ++i) d.counts.push_back(r.Get<int64_t>("count"));
  d.name = r.GetString("name", kMaxName);
  const uint32_t dims = bounded("shape", kMaxDims, 8);
  for (uint32_t i = 0; i < dims; ++i) d.shape.push_back(r.Get<int64_t>("dimension"));
  r.ExpectEnd();
  return d;
}

uint64_t CallDescription::Fingerprint() const {
  std::string encoding;
  return EncodeInto(encoding);
}

std::string CallDescription::Summary() const {
  std::string s = CallKindName(kind);
  if (!name.empty()) s += fmt::format(" '{}'", name);
  if (kind == CallKind::kBarrier) return s;
  s += fmt::format(" {} {}", base::DTypeName(dtype), ShapeText(*this));
  if (HasReduction(kind)) s += " " + ReductionText(reduction);
  if (kind == CallKind::kBroadcast) s += fmt::format(" root {}", root);
  if (!counts.empty()) s += fmt::format(" counts {}", Dims(counts));
  return s;
}

std::string CallNotice::Encode() const {
  base::ByteWriter w;
  w.Put(communicator);
  w.Put(sequence);
  w.Put(static_cast<uint8_t>(kind));
  w.Put(at);
  w.PutString(description);
  w.PutString(text);
  return w.Take();
}

CallNotice CallNotice::Decode(const std::string& meta) {
  base::ByteReader r(meta, "collective call notice");
  CallNotice n;
  n.communicator = r.Get<uint32_t>("communicator");
  n.sequence = r.Get<uint64_t>("sequence");
  const auto kind = r.Get<uint8_t>("kind");
  if (kind < 1 || kind > 5) {
    throw ProtocolError(fmt::format("collective call notice: kind {} is not 1-5", kind));
  }
  n.kind = static_cast<NoticeKind>(kind);
  n.at = r.Get<uint64_t>("at");
  n.description = r.GetString("description", kMaxNoticeDescription);
  n.text = r.GetString("text", kMaxNoticeText);
  r.ExpectEnd();
  if (!n.description.empty()) CallDescription::Decode(n.description);  // checked once, here
  return n;
}

std::string CommunicatorName(uint32_t communicator, const std::vector<int32_t>& members) {
  if (communicator == 0) return "world";
  return fmt::format("group {}", fmt::format("[{}]", fmt::join(members, ", ")));
}

std::string MismatchMessage(uint32_t communicator, const std::vector<int32_t>& members,
                            uint64_t sequence, const std::vector<MemberCall>& calls) {
  const std::string where = fmt::format("operation {} of communicator {}", sequence,
                                        CommunicatorName(communicator, members));
  // Ranks that made the same call, in order of their first rank.
  std::vector<std::pair<const CallDescription*, std::vector<int>>> groups;
  std::map<std::string, size_t> group_of;
  std::vector<std::string> others;  // not reached, not heard from
  for (size_t r = 0; r < calls.size(); ++r) {
    const MemberCall& m = calls[r];
    const int rank = static_cast<int>(r);
    if (!m.call) {
      others.push_back(fmt::format("rank {} not heard from", rank));
    } else if (!m.reached) {
      others.push_back(fmt::format("rank {} has not called it (its latest call: operation {}, {})",
                                   rank, m.at, m.call->Summary()));
    } else {
      auto [it, inserted] = group_of.try_emplace(m.call->Encode(), groups.size());
      if (inserted) groups.push_back({&*m.call, {}});
      groups[it->second].second.push_back(rank);
    }
  }
  std::string tail;
  for (const std::string& o : others) tail += "; " + o;
  if (groups.empty()) return fmt::format("mismatched calls at {}{}", where, tail);
  const CallDescription& first = *groups.front().first;
  std::vector<std::string> fields;
  auto differs = [&](auto get) {
    for (const auto& g : groups) {
      if (get(*g.first) != get(first)) return true;
    }
    return false;
  };
  const bool order = differs([](const CallDescription& d) { return d.kind; }) ||
                     differs([](const CallDescription& d) { return d.name; });
  std::string text;
  if (order || groups.size() == 1) {
    text = fmt::format("{} at {}: ", order ? "call order differs" : "mismatched calls", where);
    for (size_t i = 0; i < groups.size(); ++i) {
      text += fmt::format("{}{} {}", i ? "; " : "", RankList(groups[i].second),
                          groups[i].first->Summary());
    }
    return text + tail;
  }
  const bool dtype = differs([](const CallDescription& d) { return d.dtype; });
  const bool shape = differs([](const CallDescription& d) { return d.count; }) ||
                     differs([](const CallDescription& d) { return d.shape; });
  const bool reduction = differs([](const CallDescription& d) { return d.reduction; });
  const bool root = differs([](const CallDescription& d) { return d.root; });
  const bool counts = differs([](const CallDescription& d) { return d.counts; });
  const bool algorithm = differs([](const CallDescription& d) { return d.algorithm; });
  const bool segment = differs([](const CallDescription& d) { return d.segment_bytes; });
  const bool scaling = differs([](const CallDescription& d) { return d.prescale; }) ||
                       differs([](const CallDescription& d) { return d.postscale; });
  if (dtype) fields.push_back("dtype");
  if (shape) fields.push_back("shape");
  if (reduction) fields.push_back("reduction");
  if (root) fields.push_back("root");
  if (counts) fields.push_back("counts");
  if (algorithm) fields.push_back("algorithm (TANDEM_ALLREDUCE_ALGORITHM)");
  if (segment) fields.push_back("segment size (TANDEM_COLLECTIVE_SEGMENT_BYTES)");
  if (scaling) fields.push_back("scaling");
  std::string head = CallKindName(first.kind);
  if (!first.name.empty()) head += fmt::format(" '{}'", first.name);
  text = fmt::format("{}: mismatched {} at {}: ", head, fmt::join(fields, " and "), where);
  for (size_t i = 0; i < groups.size(); ++i) {
    const CallDescription& d = *groups[i].first;
    std::string v;
    if (d.kind != CallKind::kBarrier)
      v = fmt::format("{} {}", base::DTypeName(d.dtype), ShapeText(d));
    if (reduction) v += " " + ReductionText(d.reduction);
    if (root) v += fmt::format(" root {}", d.root);
    if (counts) v += fmt::format(" counts {}", Dims(d.counts));
    if (algorithm) {
      v += " algorithm " + AllReduceAlgorithmName(static_cast<AllReduceAlgorithm>(d.algorithm));
    }
    if (segment) v += fmt::format(" segment {} bytes", d.segment_bytes);
    if (scaling) v += fmt::format(" prescale {} postscale {}", d.prescale, d.postscale);
    text += fmt::format("{}{} {}", i ? "; " : "", RankList(groups[i].second), v);
  }
  return text + tail;
}

}  // namespace tandem::collective
