// Which allreduce algorithm runs for a message of a given size in a group
// of a given size. The rows come from measurements (bench/collective_bench,
// docs/benchmarks.md); TANDEM_ALLREDUCE_ALGORITHM overrides them.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "base/environment.h"
#include "tandem/collective.h"

namespace tandem::collective {

/// How a group's members are spread over hosts (every member knows it
/// alike, from the node table).
struct HostSpread {
  int hosts = 1;
  int per_host = 0;  ///< ranks on each host; 0 when hosts hold different numbers

  /// Whether the hierarchical allreduce has a shape to run on: 2 or more
  /// hosts with as many ranks, 2 or more, on each.
  bool FitsHierarchical() const { return hosts >= 2 && per_host >= 2; }
};

/// Thread-safety: immutable after construction; any thread.
class AlgorithmTable {
 public:
  /// The measured table, with the override of TANDEM_ALLREDUCE_ALGORITHM
  /// ("auto", "ring", "halving_doubling", "direct", "recursive_doubling",
  /// "hierarchical") if set, and TANDEM_HIERARCHICAL_ALLREDUCE ("auto",
  /// "1", "0"; where unset, HOROVOD_HIERARCHICAL_ALLREDUCE). Throws
  /// ConfigError for another value, naming the variable.
  static AlgorithmTable FromEnvironment(const base::Environment& env);

  /// Which rows apply: pieces between the members go by the same-host copy
  /// (every member on one host offered it), or over TCP.
  enum class Path { kTcp, kSameHostCopy };

  /// When TANDEM_HIERARCHICAL_ALLREDUCE is "auto" (the default), messages
  /// from this size among at least 2 hosts of at least 2 ranks each take
  /// the hierarchical allreduce (docs/collectives.md "The selection
  /// table"): on the 4-host 1 Gbit/s bed with 2 ranks per host it took
  /// 2.6 against the flat choice's 2.8 ms at 64 KiB, 5.5/8.2 at 256 KiB,
  /// 18/43 at 1 MiB; at 16 KiB recursive doubling stays (1.6 against 1.9).
  static constexpr size_t kHierarchicalMinBytes = 64 << 10;

  /// The algorithm for `bytes` of payload among `group_size` ranks on
  /// `path`, spread over hosts as `spread`: `requested` unless it is kAuto,
  /// else TANDEM_ALLREDUCE_ALGORITHM, else the hierarchical allreduce where
  /// TANDEM_HIERARCHICAL_ALLREDUCE and the spread call for it, else the
  /// table.
  AllReduceAlgorithm Choose(size_t bytes, int group_size,
                            AllReduceAlgorithm requested = AllReduceAlgorithm::kAuto,
                            Path path = Path::kTcp, HostSpread spread = {}) const;

  /// Parses an algorithm name as above. Throws ConfigError naming `name`.
  static AllReduceAlgorithm Parse(std::string_view name);

 private:
  // TANDEM_HIERARCHICAL_ALLREDUCE's values.
  enum class Hierarchical { kAuto, kOn, kOff };

  std::optional<AllReduceAlgorithm> forced_;
  Hierarchical hierarchical_ = Hierarchical::kAuto;
};

}  // namespace tandem::collective
