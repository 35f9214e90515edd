// The state behind tandem::Communicator: a group over the process's peer
// mesh, its queue of operations and the thread that runs them in order.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/logger.h"
#include "base/op_recorder.h"
#include "base/stats.h"
#include "collective/algorithm_table.h"
#include "collective/algorithms.h"
#include "collective/call_description.h"
#include "collective/op_context.h"
#include "collective/peer_mesh.h"
#include "collective/point_to_point.h"
#include "tandem/collective.h"

namespace tandem::collective {

/// The completion state a CollectiveHandle shares with its operation.
struct OpState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  /// A receive's sender (group rank), once done; -1 for other operations.
  int source = -1;
  /// Counts the callers blocked in Wait (the communicator's call state's
  /// user_waits, for the crossed-order check); null: not counted.
  std::atomic<int>* waiting = nullptr;
};

/// Settings every communicator of a process shares (docs/collectives.md,
/// "Environment").
struct CommunicatorSettings {
  /// The pipelining segment when TANDEM_COLLECTIVE_SEGMENT_BYTES is not set:
  /// within one host (loopback TCP or the same-host copy), large segments
  /// cost fewer messages; across a network, small ones keep every link of
  /// the ring busy (docs/benchmarks.md, "The multi-host bed").
  static constexpr size_t kOneHostSegmentBytes = 1 << 20;
  static constexpr size_t kNetworkSegmentBytes = 256 << 10;

  std::chrono::milliseconds timeout{300000};  ///< TANDEM_COLLECTIVE_TIMEOUT
  size_t segment_bytes = 1 << 20;             ///< TANDEM_COLLECTIVE_SEGMENT_BYTES
  /// False when TANDEM_COLLECTIVE_SEGMENT_BYTES set `segment_bytes`; true:
  /// each communicator picks kOneHostSegmentBytes when all its members
  /// announced the same host address, else kNetworkSegmentBytes.
  bool segment_by_placement = false;
  AlgorithmTable table;  ///< TANDEM_ALLREDUCE_ALGORITHM
  /// Which rows of `table` apply: kSameHostCopy when every member announced
  /// the same host and offered the same-host copy (what every member knows
  /// alike, so all choose alike).
  AlgorithmTable::Path path = AlgorithmTable::Path::kTcp;
  /// The members by host (the node table's addresses), for the
  /// hierarchical allreduce and the table's choice of it.
  HostLayout layout;
  /// The membership epoch the communicator is made for (elastic jobs: a
  /// change of the members retires the communicators of older epochs).
  uint32_t epoch = 0;
};

/// Thread-safety: Submit and Run may be called from any thread; the queue
/// and `busy_` are guarded by `mu_`. One operation runs at a time, on the
/// communicator's thread or (Run) on a caller's; the sequence counter and
/// the scratch buffer belong to whichever thread holds `busy_`.
class CommunicatorImpl {
 public:
  /// An operation's body: runs on the communicator's thread with the
  /// operation's context and a scratch allocator.
  using Body = std::function<void(OpContext&, CommunicatorImpl&)>;

  /// `members` maps group rank to worker rank; this process is worker
  /// `mesh.rank()`, which must be among them. `mesh` and `log` are borrowed.
  /// `ops` records each operation's latency (and trace span); `queued`
  /// counts operations waiting for the communicator's thread (shared by a
  /// process's communicators). Both borrowed.
  CommunicatorImpl(PeerMesh& mesh, uint32_t id, std::vector<int> members,
                   CommunicatorSettings settings, base::Logger& log, base::OpRecorder& ops,
                   base::Gauge& queued);
  /// Runs what is queued, then stops the thread.
  ~CommunicatorImpl();

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(members_.size()); }
  const std::vector<int>& members() const { return members_; }
  const CommunicatorSettings& settings() const { return settings_; }
  /// The process's logger (borrowed at construction).
  base::Logger& log() const { return log_; }

  /// Queues an operation named `what` (for errors) with `timeout` (zero:
  /// the default); `call` describes it for the call checks. Never throws for the operation's own
  /// errors: the handle carries them.
  CollectiveHandle Submit(std::string what, CallDescription call, std::chrono::milliseconds timeout,
                          Body body);

  /// As Submit followed by Wait, but when nothing is queued or running the
  /// operation runs on the calling thread (no hop to the communicator's
  /// thread and back). Throws what the operation threw.
  void Run(std::string what, CallDescription call, std::chrono::milliseconds timeout, Body body);

  /// A scratch buffer of at least `bytes`, valid until the next call; only
  /// on the communicator's thread.
  std::span<std::byte> Scratch(size_t bytes);
  /// A second such buffer, apart from Scratch's: an allreduce's data in its
  /// narrower wire dtype (ReduceOptions::wire_dtype), which the algorithm
  /// reduces while using Scratch.
  std::span<std::byte> WireBuffer(size_t bytes);

  /// The point-to-point messages of this communicator (point_to_point.h),
  /// which bypass the queue: `timeout` zero is the default.
  CollectiveHandle SendTo(std::string what, int peer, uint64_t tag,
                          std::span<const std::byte> bytes, std::chrono::milliseconds timeout);
  CollectiveHandle ReceiveFrom(std::string what, int peer, uint64_t tag, std::span<std::byte> dest,
                               std::chrono::milliseconds timeout);

 private:
  struct Task {
    std::string what;
    CallDescription call;
    std::chrono::milliseconds timeout;
    Body body;
    std::shared_ptr<OpState> state;
  };
  void Loop();
  // Runs one operation; requires busy_ set by the caller.
  std::exception_ptr Execute(const std::string& what, const CallDescription& call,
                             std::chrono::milliseconds timeout, const Body& body);

  PeerMesh& mesh_;
  const uint32_t id_;
  const std::vector<int> members_;
  const int rank_;
  const CommunicatorSettings settings_;
  base::Logger& log_;
  base::OpRecorder& ops_;
  base::Gauge& queued_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;  // guarded by mu_
  bool stopping_ = false;   // guarded by mu_
  bool busy_ = false;       // guarded by mu_: an operation is running

  PeerMesh::CallState* const call_state_;  // the mesh's, for user_waits
  uint64_t sequence_ = 0;                  // the thread holding busy_
  std::string call_buffer_;                // the thread holding busy_ (OpContext)
  std::vector<std::byte> scratch_;         // the thread holding busy_
  std::vector<std::byte> wire_buffer_;     // the thread holding busy_
  std::thread thread_;
  PointToPoint p2p_;  // after thread_: destroyed first
};

}  // namespace tandem::collective
