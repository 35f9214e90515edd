// The messages of the membership protocol (docs/protocol-cluster.md) and
// their metadata codecs. Every decoder is bounds-checked (base::ByteReader)
// and throws tandem::ProtocolError on malformed input.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "net/wire_format.h"
#include "tandem/cluster.h"

namespace tandem::cluster {

/// Message types of the cluster range (net::msgtype::kClusterFirst..+63).
namespace msg {
// node -> scheduler
inline constexpr uint16_t kRegister = net::msgtype::kClusterFirst + 0;
inline constexpr uint16_t kBarrier = net::msgtype::kClusterFirst + 1;
inline constexpr uint16_t kHeartbeat = net::msgtype::kClusterFirst + 2;
inline constexpr uint16_t kLeave = net::msgtype::kClusterFirst + 3;
inline constexpr uint16_t kStopJob = net::msgtype::kClusterFirst + 4;
inline constexpr uint16_t kSchedulerBoundLast = kStopJob;
// scheduler -> node
inline constexpr uint16_t kNodeTable = net::msgtype::kClusterFirst + 16;
inline constexpr uint16_t kRejected = net::msgtype::kClusterFirst + 17;
inline constexpr uint16_t kBarrierDone = net::msgtype::kClusterFirst + 18;
inline constexpr uint16_t kBarrierFailed = net::msgtype::kClusterFirst + 19;
inline constexpr uint16_t kHeartbeatAck = net::msgtype::kClusterFirst + 20;
inline constexpr uint16_t kNodeLost = net::msgtype::kClusterFirst + 21;
inline constexpr uint16_t kStartTimedOut = net::msgtype::kClusterFirst + 22;
inline constexpr uint16_t kJobStopped = net::msgtype::kClusterFirst + 23;
inline constexpr uint16_t kWorkerLeft = net::msgtype::kClusterFirst + 24;
inline constexpr uint16_t kWorkerJoined = net::msgtype::kClusterFirst + 25;
inline constexpr uint16_t kAdmitted = net::msgtype::kClusterFirst + 26;
inline constexpr uint16_t kJoinPending = net::msgtype::kClusterFirst + 27;
inline constexpr uint16_t kJoinQueued = net::msgtype::kClusterFirst + 28;
inline constexpr uint16_t kNodeBoundFirst = kNodeTable;
inline constexpr uint16_t kNodeBoundLast = kJoinQueued;
}  // namespace msg

/// Sent by a node when it first connects to the scheduler.
struct RegisterRequest {
  Role role = Role::kWorker;
  int32_t requested_rank = -1;  ///< -1: let the scheduler choose
  std::string host;             ///< where other nodes reach this node
  uint16_t port = 0;            ///< its listening port
  uint32_t pid = 0;             ///< for diagnostics
  std::string hostname;         ///< for diagnostics

  std::string Encode() const;
  static RegisterRequest Decode(const std::string& meta);
};

/// The scheduler's answer once every node registered: the whole job.
struct NodeTable {
  int32_t num_servers = 0;
  int32_t num_workers = 0;
  std::vector<NodeInfo> nodes;  ///< ordered by id; id == index

  std::string Encode() const;
  /// Also validates the table: ids are 0..n-1 in order, node 0 is the
  /// scheduler, ranks per role are 0..count-1 exactly once, counts match.
  static NodeTable Decode(const std::string& meta);
};

/// A barrier request: the group mask and this node's count of barriers over
/// that mask so far (all members must agree on it).
struct BarrierRequest {
  /// The final barrier of Finalize(): it lasts as long as the slowest node's
  /// work, so the scheduler applies no barrier timeout to it (heartbeats
  /// still watch every node).
  static constexpr uint8_t kFinal = 1;
  /// A regroup of the workers (Collectives::Regroup): workers waiting to
  /// join an elastic job are admitted when such a barrier over the workers
  /// completes, and every member that arrived set it (docs/elastic.md,
  /// "Workers that join").
  static constexpr uint8_t kAdmit = 2;
  uint8_t groups = 0;
  uint8_t flags = 0;
  uint64_t sequence = 0;

  std::string Encode() const;
  static BarrierRequest Decode(const std::string& meta);
};

/// Why a barrier failed: it timed out, or its members disagree on how many
/// barriers they passed.
struct BarrierFailure {
  bool timed_out = false;
  std::string text;

  std::string Encode() const;
  static BarrierFailure Decode(const std::string& meta);
};

/// Tells every node that one was lost.
struct NodeLostNotice {
  NodeInfo node;
  std::string reason;

  std::string Encode() const;
  static NodeLostNotice Decode(const std::string& meta);
};

/// Tells every remaining node that a worker left an elastic job, which goes
/// on without it (kWorkerLeft; docs/elastic.md): the membership's new epoch
/// and the workers that remain.
struct WorkerLeftNotice {
  uint32_t epoch = 0;  ///< 1 for the first change, +1 for each further one
  NodeInfo node;       ///< the worker that left
  std::string reason;
  std::vector<int32_t> remaining;  ///< the ranks of the workers that remain, ascending

  std::string Encode() const;
  /// Also validates: epoch >= 1, the remaining ranks ascending, non-empty,
  /// and without the worker that left.
  static WorkerLeftNotice Decode(const std::string& meta);
};

/// Tells every node of an elastic job that a worker took a departed
/// worker's place (kWorkerJoined; docs/elastic.md, "Workers that join"):
/// the membership's new epoch, the new worker (the departed one's node id
/// and rank, its own address) and the members now.
struct WorkerJoinedNotice {
  uint32_t epoch = 0;            ///< the change's epoch (>= 2: a worker left first)
  NodeInfo node;                 ///< the worker that joined
  std::vector<int32_t> workers;  ///< every member's rank, ascending, the new one's too

  std::string Encode() const;
  /// Also validates: epoch >= 1, a worker, ranks ascending and containing
  /// the new one.
  static WorkerJoinedNotice Decode(const std::string& meta);
};

/// The scheduler's answer to a worker admitted into a running elastic job
/// (kAdmitted), in place of kNodeTable: the job's table with this worker's
/// entry, the membership as of its admission, and how many barriers each
/// group mask has passed, so that its next barrier matches the others'.
struct Admission {
  NodeTable table;
  uint32_t epoch = 0;
  std::vector<int32_t> workers;  ///< the members' ranks, ascending, this worker's too
  std::vector<std::pair<uint8_t, uint64_t>> barriers;  ///< (group mask, barriers passed)
  /// The members admitted since the job went below its minimum, before
  /// this worker (ascending; empty when it is not below): like this one,
  /// they hold none of the job's state yet, so the members' next world
  /// puts them last with it (docs/elastic.md, "Below the minimum").
  std::vector<int32_t> joined_below_minimum;

  std::string Encode() const;
  static Admission Decode(const std::string& meta);
};

/// Tells the members of an elastic job how many workers wait to be
/// admitted at the next regroup (kJoinPending; 0 once none do).
struct JoinPendingNotice {
  uint32_t waiting = 0;

  std::string Encode() const;
  static JoinPendingNotice Decode(const std::string& meta);
};

/// Which of tandem's errors stopped a job (JobStopRequest): every node
/// throws that kind, so every process exits with the same code
/// (docs/deploy.md, "Exit codes and restarts").
enum class StopKind : uint8_t {
  kError = 0,            ///< tandem::Error
  kInvalidArgument = 1,  ///< tandem::InvalidArgument (a file that does not load, a refused value)
  kConfigError = 2,      ///< tandem::ConfigError
  kIoError = 3,          ///< tandem::IoError (a write that failed)
  kProtocolError = 4,    ///< tandem::ProtocolError
  kLast = kProtocolError,
};

/// The kind for an exception (most derived tandem class first; kError for
/// anything else). Never throws.
StopKind StopKindOf(const std::exception& error) noexcept;

/// Throws the exception of `kind` with `text`.
[[noreturn]] void ThrowStopKind(StopKind kind, const std::string& text);

/// A node -> scheduler request to stop the whole job (kStopJob): a server
/// failed in a way that leaves the job unable to go on as its workers asked
/// (docs/protocol-cluster.md, "Stopping the job").
struct JobStopRequest {
  StopKind kind = StopKind::kError;
  std::string reason;

  std::string Encode() const;
  static JobStopRequest Decode(const std::string& meta);
};

/// Tells every other node that `node` stopped the job, and why (kJobStopped).
struct JobStoppedNotice {
  NodeInfo node;
  StopKind kind = StopKind::kError;
  std::string reason;

  std::string Encode() const;
  static JobStoppedNotice Decode(const std::string& meta);
};

/// Metadata that is just a human-readable text (kRejected, kBarrierFailed).
std::string EncodeText(const std::string& text);
std::string DecodeText(const std::string& meta, const char* what);

/// True when node `n` belongs to the barrier group mask.
bool InGroups(const NodeInfo& n, int groups);

/// "servers+workers" and the like, for messages.
std::string GroupsName(int groups);

}  // namespace tandem::cluster
