// Point-to-point messages of one communicator (docs/collectives.md,
// "Point-to-point"): Send and Receive between two members, matched by
// (sender, receiver, tag) in call order, outside the communicator's queue
// of collective operations.
//
// On the wire a message is one piece of the peer mesh keyed by the
// communicator, a sequence with kPointToPointSequence set, and the tag. The
// sender numbers its messages to each (peer, tag) 0, 1, 2, ...; the
// receiver numbers its receives from each (peer, tag) alike, so the n-th
// send meets the n-th receive without any handshake. A receive from any
// member takes, among the members whose next message with that tag already
// arrived, the first in rank order.
//
// Sends are started on the caller's thread and complete when the mesh is
// done with the bytes (written to the kernel, or copied by a same-host
// peer). Receives are posted on the caller's thread and completed by one
// progress thread per communicator, started by the first operation, which
// also enforces every operation's deadline. A timed-out message leaves the
// two sides' numbering out of step, so a timeout fails the mesh, as a
// collective's does; a receive of the wrong size only fails that receive.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/logger.h"
#include "collective/peer_mesh.h"

namespace tandem::collective {

struct OpState;

/// Thread-safety: Send and Receive may be called from any thread; the state
/// is guarded by `mu_`, which is never held while the mesh sends.
class PointToPoint {
 public:
  /// `members` maps group rank to worker rank; `rank` is this process's
  /// group rank. `mesh` and `log` are borrowed.
  PointToPoint(PeerMesh& mesh, uint32_t communicator, std::vector<int> members, int rank,
               base::Logger& log);
  /// Stops the progress thread; receives still pending fail with an
  /// InvalidArgument saying the communicator was destroyed.
  ~PointToPoint();
  PointToPoint(const PointToPoint&) = delete;
  PointToPoint& operator=(const PointToPoint&) = delete;

  /// Sends `bytes` (borrowed until the returned state is done) to group
  /// rank `peer` as message `tag`; `what` names it in errors.
  std::shared_ptr<OpState> Send(std::string what, int peer, uint64_t tag,
                                std::span<const std::byte> bytes,
                                std::chrono::milliseconds timeout);
  /// Receives message `tag` from group rank `peer`, or from any other
  /// member when `peer` is kAnySource, into `dest` (borrowed until the
  /// returned state is done; its `source` says who sent it).
  std::shared_ptr<OpState> Receive(std::string what, int peer, uint64_t tag,
                                   std::span<std::byte> dest, std::chrono::milliseconds timeout);

  static constexpr int kAnySource = -1;

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    std::string what;
    bool is_send = false;
    int peer = kAnySource;  // group rank; kAnySource until a message is chosen
    uint64_t tag = 0;
    MessageKey key;             // valid once peer is known
    std::span<std::byte> dest;  // receives
    Clock::time_point deadline;
    std::shared_ptr<OpState> state;
  };

  MessageKey Key(uint64_t sequence, uint64_t tag) const;
  int Worker(int peer) const { return members_[static_cast<size_t>(peer)]; }
  void CheckPeer(const std::string& what, int peer, bool any_allowed) const;
  // Files `p` and has the progress thread look at it; requires mu_.
  void AddLocked(Pending p);
  // Wakes the progress thread, waiting or not (after AddLocked, without mu_).
  void Notify();
  // The lowest group rank, not this one, whose next message with `tag`
  // arrived (what a receive from any member takes); requires mu_.
  std::optional<int> ArrivedSourceLocked(uint64_t tag);
  // Starts the progress thread if it is not running; requires mu_.
  void StartLocked();
  void Loop();
  // True when the progress thread has something to do; takes mu_.
  bool Due();
  // Completes what can be completed, chooses the sources of receives from
  // any member, and fails what is past its deadline.
  void Step();
  void FailOnTimeout(const Pending& p);

  PeerMesh& mesh_;
  const uint32_t communicator_;
  const std::vector<int> members_;
  const int rank_;
  base::Logger& log_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int, uint64_t>, uint64_t> sent_;      // (peer, tag) -> next sequence
  std::map<std::pair<int, uint64_t>, uint64_t> received_;  // (peer, tag) -> next sequence
  std::map<uint64_t, Pending> pending_;                    // by call order
  uint64_t next_id_ = 0;
  // After a failure, how long sends may take to settle before every
  // connection is closed (which fails them).
  static constexpr std::chrono::seconds kSettle{10};

  bool fresh_ = false;                          // an operation was added since the last Step
  std::optional<Clock::time_point> failed_at_;  // when Step first saw the mesh failed
  bool closed_all_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tandem::collective
