// What one collective call is, as every member of its communicator must
// agree on it (docs/collectives.md "Call checks", the encoding in
// docs/protocol-collective.md "Call description").
//
// Every piece of an operation carries the 64-bit fingerprint of its
// sender's description (MessageKey::call); a receiver compares it with its
// own before it uses a byte of the piece. On a mismatch the members
// exchange their full descriptions (kCallNotice), so the error every rank
// raises lists each rank's call.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tandem/tensor.h"

namespace tandem::collective {

/// The operations a description names.
enum class CallKind : uint8_t {
  kAllReduce = 1,
  kBroadcast = 2,
  kAllGather = 3,
  kReduceScatter = 4,
  kAllToAll = 5,
  kBarrier = 6,
};

/// "allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall",
/// "barrier".
const char* CallKindName(CallKind kind);

/// One call on one rank. Every field but `shape` enters the fingerprint;
/// the communicator is not a field: its id, derived from its members, is in
/// every piece's key, so members of different groups never match.
/// `shape` is shown in errors only (a shape is a view: ranks that pass [2, 5]
/// and [10] agree).
struct CallDescription {
  CallKind kind = CallKind::kBarrier;
  DType dtype = DType::kU8;
  /// Elements of this rank's input (AllReduce, Broadcast, ReduceScatter,
  /// AllToAll) or of the gathered output (AllGather).
  uint64_t count = 0;
  /// tandem::Reduction's value (AllReduce, ReduceScatter), else 0.
  uint8_t reduction = 0;
  /// The algorithm this rank chose (AllReduceAlgorithm's value), else 0:
  /// ranks whose settings differ would exchange different pieces.
  uint8_t algorithm = 0;
  /// Broadcast's root (group rank), else -1.
  int32_t root = -1;
  /// The pipelining segment in bytes (TANDEM_COLLECTIVE_SEGMENT_BYTES or
  /// the placement's), for the operations that cut their data in segments.
  uint64_t segment_bytes = 0;
  /// The scaling factors of AllReduce and ReduceScatter (1 when unused).
  double prescale = 1.0;
  double postscale = 1.0;
  /// AllGatherV's per-rank counts; empty otherwise.
  std::vector<int64_t> counts;
  /// The tensor's name (CollectiveOptions::name); may be empty.
  std::string name;
  /// The tensor's shape as the caller passed it (display only).
  std::vector<int64_t> shape;

  /// The wire encoding (docs/protocol-collective.md).
  std::string Encode() const;
  /// Throws ProtocolError naming the field on malformed input; bounds every
  /// length before it allocates.
  static CallDescription Decode(const std::string& bytes);
  /// A 64-bit hash of the encoding of every field but `shape`
  /// (docs/protocol-collective.md "Call description"); never 0 (0 marks a
  /// piece that carries no fingerprint).
  uint64_t Fingerprint() const;
  /// Encode() and Fingerprint() from one encoding, written into `encoding`
  /// (emptied first, its capacity kept: what an operation does once as it
  /// begins, without allocating). Returns the fingerprint.
  uint64_t EncodeInto(std::string& encoding) const;
  /// "allreduce 'grad' float32 [4] sum", for errors.
  std::string Summary() const;
};

/// How a rank answers on kCallNotice.
enum class NoticeKind : uint8_t {
  /// `description` is the sender's own call at `sequence`.
  kDescription = 1,
  /// The sender has not reached `sequence`; `description` is its latest
  /// call on the communicator (at `at`; empty when it made none).
  kNotReached = 2,
  /// The operation cannot complete; `text` says why (a member is stuck in
  /// another communicator's operation).
  kAbort = 3,
  /// The sender waits for the receiver in operation `sequence` and asks
  /// whether the receiver is blocked in another communicator's call.
  kProbe = 4,
  /// The answer: `at` is 1 when the receiver of the probe has a caller
  /// blocked in another communicator and has not begun `sequence`, else 0.
  kProbeReply = 5,
};

/// kCallNotice's metadata.
struct CallNotice {
  uint32_t communicator = 0;
  uint64_t sequence = 0;
  NoticeKind kind = NoticeKind::kDescription;
  uint64_t at = 0;
  std::string description;  // a CallDescription's encoding, or empty
  std::string text;

  std::string Encode() const;
  static CallNotice Decode(const std::string& meta);
};

/// "world" for communicator 0, else "group [0, 2, 3]".
std::string CommunicatorName(uint32_t communicator, const std::vector<int32_t>& members);

/// What one member said of a mismatched operation.
struct MemberCall {
  /// Its call at the operation (kDescription), its latest one (kNotReached:
  /// `at` is its sequence), or nothing heard.
  std::optional<CallDescription> call;
  bool reached = false;
  uint64_t at = 0;
};

/// The error text of a mismatch at operation `sequence` of `communicator`:
/// `calls` is indexed by group rank. Groups ranks that made the same call,
/// e.g. "allreduce 'w': mismatched dtype at operation 3 of communicator
/// world: ranks 0 float32 [10]; ranks 1-2 int32 [10]" or "call order differs
/// at operation 17 of communicator world: rank 0 allreduce 'a' float32 [4]
/// sum; rank 1 allreduce 'b' float32 [4] sum".
std::string MismatchMessage(uint32_t communicator, const std::vector<int32_t>& members,
                            uint64_t sequence, const std::vector<MemberCall>& calls);

}  // namespace tandem::collective
