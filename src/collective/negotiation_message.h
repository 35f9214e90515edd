// What a framework engine tells the others each cycle: the named requests it
// holds, either in full or, for a request the ranks agreed before, as a bit
// of the response cache. docs/protocol-collective.md ("Framework engine")
// gives the byte layout; the fusion engine (fusion_engine.h) exchanges one
// message per rank per cycle over its communicator's AllGather.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/collective.h"
#include "tandem/tensor.h"

namespace tandem::collective {

/// The kinds of named request.
enum class RequestKind : uint8_t { kAllReduce = 0, kBroadcast = 1 };

/// One named request as every rank must submit it alike.
struct TensorRequest {
  std::string name;
  RequestKind kind = RequestKind::kAllReduce;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  Reduction op = Reduction::kSum;                            ///< allreduce only (0 for broadcast)
  int32_t root = 0;                                          ///< broadcast only (0 for allreduce)
  double prescale = 1.0;                                     ///< allreduce only
  double postscale = 1.0;                                    ///< allreduce only
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kAuto;  ///< allreduce only

  bool operator==(const TensorRequest&) const = default;

  /// "allreduce float32[2,3] sum" / "broadcast int64[7] root 2", for errors.
  std::string Describe() const;
};

/// The settings of an engine that rank 0 decides for every rank.
struct EngineSettings {
  size_t fusion_threshold = size_t{128} << 20;
  std::chrono::microseconds cycle_time{1000};
  /// The algorithm of requests submitted with kAuto; kAuto leaves them to
  /// the communicator's selection table.
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kAuto;

  bool operator==(const EngineSettings&) const = default;
  /// "fusion threshold 16777216 B, cycle time 2.5 ms, algorithm auto".
  std::string Describe() const;
};

/// One rank's message of one cycle.
struct CycleMessage {
  /// Limits the decoder enforces.
  static constexpr uint32_t kMaxDims = 64;
  static constexpr uint32_t kMaxNameBytes = 4096;
  static constexpr uint32_t kMaxCacheBits = 1u << 20;
  static constexpr uint32_t kMaxRequests = 1u << 20;
  static constexpr uint64_t kMaxFusionThreshold = uint64_t{1} << 36;
  static constexpr uint32_t kMaxCycleTimeUs = 60000000;

  bool stopping = false;  ///< this rank's engine is being destroyed
  int64_t clock_ms = 0;   ///< the sender's steady clock (rank 0's is used)
  /// The sender's settings; rank 0's are in force on every rank for the
  /// cycle that carried them (the cycle time from the next wait on).
  EngineSettings settings;
  /// The sender's response-cache capacity (rank 0's is in force).
  uint32_t cache_capacity = 0;
  /// Bit i set: the sender holds a request equal to response-cache entry i.
  /// Its length is the sender's cache size.
  std::vector<bool> cached;
  /// Requests sent in full (not cached, or different from their entry).
  std::vector<TensorRequest> requests;

  std::string Encode() const;
  /// Throws ProtocolError naming the field for anything malformed: a
  /// truncation, trailing bytes, an unknown kind, dtype or reduction, a
  /// negative dimension, an unknown algorithm, a count or setting past the
  /// limits above, or a bool not 0 or 1.
  static CycleMessage Decode(std::string_view bytes);
};

}  // namespace tandem::collective
