// The allreduce selection table. Each row covers groups of up to
// `max_group` ranks and messages of up to `max_bytes`; the first row that
// covers a call decides. The rows were filled from bench/collective_bench
// runs (4 ranks on loopback; docs/benchmarks.md has the tables and the
// command): see docs/collectives.md for the reasoning.
#include "collective/algorithm_table.h"

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <span>

#include "tandem/error.h"

namespace tandem::collective {

namespace {

struct Row {
  int max_group;
  size_t max_bytes;
  AllReduceAlgorithm algorithm;
};

constexpr size_t kAny = std::numeric_limits<size_t>::max();

// Pieces over TCP (across hosts, or on one host without the copy).
constexpr Row kTcpTable[] = {
    {1, kAny, AllReduceAlgorithm::kDirect},  // nothing to exchange
    // Loopback, 2-8 ranks (docs/benchmarks.md, "Small messages over TCP"):
    // to 16 KiB direct for 2 ranks (one exchange either way) and 3 (4 KiB
    // 130 against recursive doubling's 143 us: its fold and unfold are two
    // more sequential messages), recursive doubling from 4 (4 KiB: 4 ranks
    // 191 against 205 us, 5 ranks 254/295, 6 310/410, 8 464/737);
    // halving-doubling to 1 MiB, the ring above. A crossed order of
    // communicators is found with it as with direct (docs/collectives.md,
    // "Call checks").
    {3, 16 << 10, AllReduceAlgorithm::kDirect},
    {8, 16 << 10, AllReduceAlgorithm::kRecursiveDoubling},
    {8, 1 << 20, AllReduceAlgorithm::kHalvingDoubling},
    {8, kAny, AllReduceAlgorithm::kRing},
    // Larger groups (not measured on this machine): log2 steps win over
    // n-1 for longer.
    {std::numeric_limits<int>::max(), 16 << 10, AllReduceAlgorithm::kRecursiveDoubling},
    {std::numeric_limits<int>::max(), 4 << 20, AllReduceAlgorithm::kHalvingDoubling},
    {std::numeric_limits<int>::max(), kAny, AllReduceAlgorithm::kRing},
};

// Pieces by the same-host copy (every member on one host offered it).
// 4 ranks (docs/benchmarks.md, "Collectives"): halving-doubling beats the
// ring at every size from 256 KiB (1.3-1.4x at 4-64 MiB): with the copy a
// piece costs one memcpy whatever its length, and halving-doubling moves
// its bytes in 2 log2 n steps against the ring's 2(n-1). Small vectors stay
// direct: through the mailbox a piece costs little, and recursive doubling
// was slower (4 KiB 37 against 34 us, "Small messages over TCP"). Larger
// groups are not measured.
constexpr Row kCopyTable[] = {
    {1, kAny, AllReduceAlgorithm::kDirect},
    {8, 16 << 10, AllReduceAlgorithm::kDirect},
    {8, kAny, AllReduceAlgorithm::kHalvingDoubling},
    {std::numeric_limits<int>::max(), 4 << 10, AllReduceAlgorithm::kDirect},
    {std::numeric_limits<int>::max(), 4 << 20, AllReduceAlgorithm::kHalvingDoubling},
    {std::numeric_limits<int>::max(), kAny, AllReduceAlgorithm::kRing},
};

}  // namespace

AllReduceAlgorithm AlgorithmTable::Parse(std::string_view name) {
  if (name == "auto") return AllReduceAlgorithm::kAuto;
  if (name == "ring") return AllReduceAlgorithm::kRing;
  if (name == "halving_doubling") return AllReduceAlgorithm::kHalvingDoubling;
  if (name == "direct") return AllReduceAlgorithm::kDirect;
  if (name == "recursive_doubling") return AllReduceAlgorithm::kRecursiveDoubling;
  if (name == "hierarchical") return AllReduceAlgorithm::kHierarchical;
  throw ConfigError(
      fmt::format("TANDEM_ALLREDUCE_ALGORITHM='{}' is not an algorithm (expected auto, ring, "
                  "halving_doubling, direct, recursive_doubling or hierarchical)",
                  name));
}

AlgorithmTable AlgorithmTable::FromEnvironment(const base::Environment& env) {
  AlgorithmTable t;
  AllReduceAlgorithm a = Parse(env.GetString("TANDEM_ALLREDUCE_ALGORITHM", "auto"));
  if (a != AllReduceAlgorithm::kAuto) t.forced_ = a;
  // Horovod's name is read where tandem's is not set.
  const std::string name = env.Get("TANDEM_HIERARCHICAL_ALLREDUCE")
                               ? "TANDEM_HIERARCHICAL_ALLREDUCE"
                               : "HOROVOD_HIERARCHICAL_ALLREDUCE";
  const std::string h = env.GetString(name, "auto");
  if (h == "1") {
    t.hierarchical_ = Hierarchical::kOn;
  } else if (h == "0") {
    t.hierarchical_ = Hierarchical::kOff;
  } else if (h != "auto") {
    throw ConfigError(fmt::format("{}='{}' is not one of auto, 1 (on) or 0 (off)", name, h));
  }
  return t;
}

AllReduceAlgorithm AlgorithmTable::Choose(size_t bytes, int group_size,
                                          AllReduceAlgorithm requested, Path path,
                                          HostSpread spread) const {
  if (requested != AllReduceAlgorithm::kAuto) return requested;
  if (forced_) return *forced_;
  if (hierarchical_ != Hierarchical::kOff && spread.FitsHierarchical() &&
      (hierarchical_ == Hierarchical::kOn || bytes >= kHierarchicalMinBytes)) {
    return AllReduceAlgorithm::kHierarchical;
  }
  const std::span<const Row> rows = path == Path::kSameHostCopy ? std::span<const Row>(kCopyTable)
                                                                : std::span<const Row>(kTcpTable);
  for (const Row& row : rows) {
    if (group_size <= row.max_group && bytes <= row.max_bytes) return row.algorithm;
  }
  return AllReduceAlgorithm::kRing;
}

}  // namespace tandem::collective
