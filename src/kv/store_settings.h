// The knobs every store reads from the environment (docs/kvstore.md,
// "Environment variables").
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "base/environment.h"
#include "kv/key_placement.h"
#include "tandem/error.h"

namespace tandem::kv {

struct StoreSettings {
  /// MXNET_KVSTORE_BIGARRAY_BOUND: arrays of at least this many elements are
  /// split across servers and summed locally by several threads.
  uint64_t big_array_bound = kDefaultBigArrayBound;
  /// MXNET_KVSTORE_REDUCTION_NTHREADS: threads of the local sum (MXNet: 4).
  int reduction_threads = 4;
  /// TANDEM_KV_PLACEMENT=balanced: large keys are cut in BytePS's
  /// proportions between servers beside workers and servers on spare hosts
  /// (BalancedShares); `mxnet` (the default): equal slices, as MXNet.
  bool balanced_placement = false;

  /// Throws ConfigError naming a bad variable.
  static StoreSettings FromEnvironment(const base::Environment& env) {
    StoreSettings s;
    s.big_array_bound = static_cast<uint64_t>(
        env.GetInt("MXNET_KVSTORE_BIGARRAY_BOUND", static_cast<int64_t>(s.big_array_bound), 1));
    s.reduction_threads = static_cast<int>(
        env.GetInt("MXNET_KVSTORE_REDUCTION_NTHREADS", s.reduction_threads, 1, 256));
    const std::string placement = env.GetString("TANDEM_KV_PLACEMENT", "mxnet");
    if (placement != "mxnet" && placement != "balanced") {
      throw ConfigError(
          fmt::format("TANDEM_KV_PLACEMENT is '{}' (expected mxnet or balanced)", placement));
    }
    s.balanced_placement = placement == "balanced";
    return s;
  }
};

}  // namespace tandem::kv
