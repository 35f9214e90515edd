// The parameter server's messages: types in net::msgtype::kKvFirst..+63 and
// the metadata of each request and response. docs/protocol-ps.md is the
// normative description (fields, order, sizes, who sends what, errors); this
// file implements it. Payloads (values, gradients, compressed words, rows)
// travel as the frame's payload, never inside the metadata.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "net/wire_format.h"
#include "tandem/tensor.h"

namespace tandem::kv {

/// The header of a response to `request` sent by node `self`: the request's
/// type and id, addressed back to its sender, flagged kResponse (plus
/// `extra_flags`, e.g. kError).
inline net::Header ResponseHeader(const net::Header& request, int32_t self,
                                  uint32_t extra_flags = 0) {
  net::Header h;
  h.type = request.type;
  h.flags = net::flags::kResponse | extra_flags;
  h.sender = self;
  h.recipient = request.sender;
  h.request_id = request.request_id;
  return h;
}

/// Message types (docs/protocol-ps.md, "Message types"). A response has the
/// request's type with flags::kResponse, and flags::kError when it failed.
namespace kvmsg {
inline constexpr uint16_t kInit = net::msgtype::kKvFirst + 0;
inline constexpr uint16_t kPush = net::msgtype::kKvFirst + 1;
inline constexpr uint16_t kPull = net::msgtype::kKvFirst + 2;
inline constexpr uint16_t kPushPull = net::msgtype::kKvFirst + 3;
inline constexpr uint16_t kRowSparsePull = net::msgtype::kKvFirst + 4;
inline constexpr uint16_t kSetOptimizer = net::msgtype::kKvFirst + 5;
inline constexpr uint16_t kSaveOptimizerStates = net::msgtype::kKvFirst + 6;
inline constexpr uint16_t kLoadOptimizerStates = net::msgtype::kKvFirst + 7;
/// Store checkpoints (docs/checkpoints.md, "Protocol"): save, stage, commit
/// or discard a round (CheckpointCommand), record worker 0's outcome of a
/// checkpoint call (CheckpointOutcome), and ask for it (no metadata; the
/// reply's payload is CheckpointOutcome::kReplyBytes, or an error reply).
inline constexpr uint16_t kCheckpoint = net::msgtype::kKvFirst + 8;
inline constexpr uint16_t kCheckpointOutcome = net::msgtype::kKvFirst + 9;
inline constexpr uint16_t kCheckpointQuery = net::msgtype::kKvFirst + 10;
/// The highest request type this version defines; a request of a type in
/// (kLastDefined, kLast] is answered with an error.
inline constexpr uint16_t kLastDefined = kCheckpointQuery;
/// Server to worker only, with flags::kResponse and the request's id: a
/// dist_sync push or pull is waiting for other workers (Receipt); its
/// answer follows when the round ends.
inline constexpr uint16_t kReceipt = net::msgtype::kKvFirst + 11;
inline constexpr uint16_t kFirst = net::msgtype::kKvFirst;
inline constexpr uint16_t kLast = net::msgtype::kKvFirst + 63;
}  // namespace kvmsg

/// "init", "push", ... for error messages; "kv message N" otherwise.
std::string KvMessageName(uint16_t type);

/// How a push's payload encodes the gradient.
enum class PayloadEncoding : uint8_t {
  kDense = 0,     ///< `count` elements of `dtype`
  kOneBit = 1,    ///< MXNet 1bit words (float32 keys only)
  kTwoBit = 2,    ///< MXNet 2bit words (float32 keys only)
  kRowSparse = 3  ///< rows.size() rows of row_length elements each
};
inline constexpr uint8_t kPayloadEncodingCount = 4;

/// How the server treats pushes (the store's type on the worker).
enum class UpdateMode : uint8_t { kSync = 0, kAsync = 1 };

/// The metadata of init, push, pull, push-pull and row-sparse pull: which
/// slice of which key, and how the payload is laid out.
struct KeyRequest {
  static constexpr uint8_t kVersion = 1;
  uint64_t key = 0;         ///< the store's key number
  int32_t worker_rank = 0;  ///< the sender's rank among the workers
  DType dtype = DType::kF32;
  UpdateMode mode = UpdateMode::kSync;
  uint64_t total_elements = 0;  ///< of the whole array
  uint64_t offset = 0;          ///< first element of this server's slice
  uint64_t count = 0;           ///< elements in this server's slice
  uint64_t row_length = 1;      ///< elements per row (1 for a dense key)
  PayloadEncoding encoding = PayloadEncoding::kDense;
  float threshold = 0.0f;  ///< of a compressed push
  int32_t priority = 0;
  /// Row-sparse push and pull: global row numbers, strictly ascending, all
  /// inside this slice.
  std::vector<uint64_t> rows;

  std::string Encode() const;
  /// Validates everything that does not need the server's state: the
  /// version, enum values, offset + count <= total, rows inside the slice
  /// and ascending, row_length dividing offset and count. Throws
  /// ProtocolError naming the field.
  static KeyRequest Decode(std::string_view meta);

  /// Bytes the payload of this request must have: a dense push or init
  /// count * element size; a compressed push the compressed size; a
  /// row-sparse push rows * row_length * element size.
  uint64_t ExpectedPushBytes() const;
};

/// SetOptimizer: the optimizer's name and its parameters as text.
struct OptimizerCommand {
  std::string name;
  std::vector<std::pair<std::string, std::string>> params;
  std::string Encode() const;
  static OptimizerCommand Decode(std::string_view meta);
};

/// Save/LoadOptimizerStates: the path the server writes or reads (its own
/// file name, already derived from the worker's prefix).
struct StatesCommand {
  std::string path;
  std::string Encode() const;
  static StatesCommand Decode(std::string_view meta);
};

/// kCheckpoint: what a server does with round `round` of the checkpoint
/// directory `dir` (docs/checkpoints.md, "Protocol").
struct CheckpointCommand {
  enum class Phase : uint8_t {
    kSave = 0,     ///< write this server's shard as round `round`
    kStage = 1,    ///< read and verify this server's file of `round`, hold it
    kCommit = 2,   ///< apply what kStage holds (it must be `round`)
    kDiscard = 3,  ///< drop what kStage holds
  };
  Phase phase = Phase::kSave;
  std::string dir;
  uint64_t round = 0;
  std::string Encode() const;
  /// Throws ProtocolError naming the field (unknown phase, empty dir).
  static CheckpointCommand Decode(std::string_view meta);
};

/// kCheckpointOutcome: how worker 0's last SaveCheckpoint or LoadCheckpoint
/// ended, kept by server 0 for the other workers to ask (kCheckpointQuery).
struct CheckpointOutcome {
  /// A query's reply payload: u8 found, 7 zero bytes, u64 round.
  static constexpr size_t kReplyBytes = 16;
  bool found = false;  ///< a round was saved or loaded
  uint64_t round = 0;
  std::string error;  ///< empty when the call succeeded
  std::string Encode() const;
  static CheckpointOutcome Decode(std::string_view meta);
};

/// kReceipt: what became of a request that waits for other workers
/// (docs/kvstore.md, "Bounded memory"). The worker's window stops counting
/// what the server no longer holds for it.
struct Receipt {
  enum class State : uint8_t {
    /// A push merged into its round: the server holds none of its bytes.
    kMerged = 0,
    /// A push or pull held until the worker's current round of its key
    /// ends: the server holds the request, and its answer is not yet due.
    kParked = 1,
  };
  State state = State::kMerged;
  std::string Encode() const;
  /// Throws ProtocolError naming an unknown state.
  static Receipt Decode(std::string_view meta);
};

/// What kind of failure an error response reports; the worker rethrows it
/// as the matching tandem exception.
enum class ErrorKind : uint8_t { kInvalidArgument = 0, kProtocol = 1, kOther = 2 };

/// The metadata of an error response.
struct ErrorReply {
  ErrorKind kind = ErrorKind::kOther;
  std::string text;
  std::string Encode() const;
  /// Never throws: an undecodable reply becomes kProtocol with a text
  /// saying so.
  static ErrorReply Decode(std::string_view meta);
  /// Throws the exception kind names, with `context` before the text.
  [[noreturn]] void Throw(std::string_view context) const;
};

}  // namespace tandem::kv
