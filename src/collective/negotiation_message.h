// What a framework engine tells the others each cycle: the named requests it
// holds, either in full or, for a request the ranks agreed before, as a bit
// of the response cache. docs/protocol-collective.md ("Framework engine")
// gives the byte layout; the fusion engine (fusion_engine.h) exchanges one
// message per rank per cycle over its communicator's AllGather.
#pragma once

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

/// One rank's message of one cycle.
struct CycleMessage {
  /// Limits the decoder enforces.
  static constexpr uint32_t kMaxDims = 64;
  static constexpr uint32_t kMaxNameBytes = 4096;
  static constexpr uint32_t kMaxCacheBits = 1u << 20;
  static constexpr uint32_t kMaxRequests = 1u << 20;

  bool stopping = false;  ///< this rank's engine is being destroyed
  int64_t clock_ms = 0;   ///< the sender's steady clock (rank 0's is used)
  /// Bit i set: the sender holds a request equal to response-cache entry i.
  /// Its length is the sender's cache size.
  std::vector<bool> cached;
  /// Requests sent in full (not cached, or different from their entry).
  std::vector<TensorRequest> requests;

  std::string Encode() const;
  /// Throws ProtocolError naming the field for anything malformed: a
  /// truncation, trailing bytes, an unknown kind, dtype or reduction, a
  /// negative dimension, an unknown algorithm, or a count past the limits above, a bool not 0 or 1.
  static CycleMessage Decode(std::string_view bytes);
};

}  // namespace tandem::collective
