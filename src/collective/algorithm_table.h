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

/// Thread-safety: immutable after construction; any thread.
class AlgorithmTable {
 public:
  /// The measured table, with the override of TANDEM_ALLREDUCE_ALGORITHM
  /// ("auto", "ring", "halving_doubling", "direct", "recursive_doubling") if set. Throws
  /// ConfigError for another value.
  static AlgorithmTable FromEnvironment(const base::Environment& env);

  /// Which rows apply: pieces between the members go by the same-host copy
  /// (every member on one host offered it), or over TCP.
  enum class Path { kTcp, kSameHostCopy };

  /// The algorithm for `bytes` of payload among `group_size` ranks on
  /// `path`: `requested` unless it is kAuto, else the override, else the
  /// table.
  AllReduceAlgorithm Choose(size_t bytes, int group_size,
                            AllReduceAlgorithm requested = AllReduceAlgorithm::kAuto,
                            Path path = Path::kTcp) const;

  /// Parses an algorithm name as above. Throws ConfigError naming `name`.
  static AllReduceAlgorithm Parse(std::string_view name);

 private:
  std::optional<AllReduceAlgorithm> forced_;
};

}  // namespace tandem::collective
