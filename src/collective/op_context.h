// One running collective operation as its algorithm sees it: the group
// (ranks 0..size-1 mapped to workers), point-to-point sends and posted
// receives keyed by a tag, and the operation's deadline.
//
// Sends are zero-copy: the bytes are read from the caller's span by the
// transport, so a span must stay unchanged until Finish() returned. Receives
// are posted before they are awaited, so the transport can read a payload
// straight into its destination.
//
// Errors name the operation ("AllReduce of 'grad' (1000 x float32)"): a
// wait past the deadline throws Timeout listing the ranks whose pieces were
// still missing; a failed mesh throws its PeerLost naming the lost rank.
// Every piece carries the fingerprint of the call (call_description.h); a
// mismatch with a member's call throws CallMismatch naming every rank's call
// (PeerMesh::ResolveMismatch). After any error the mesh is failed, every posted receive abandoned
// and every send settled (PeerMesh::Abandon and Cleanup close connections that would not settle),
// so no byte lands in the caller's memory after the operation returned. The connections of live
// peers stay open, so that they learn of a death from the dead peer itself, not from our closing.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "collective/call_description.h"
#include "collective/peer_mesh.h"

namespace tandem::collective {

/// Thread-safety: used by the one thread that runs the operation.
class OpContext {
 public:
  /// `members` maps group rank to worker rank; `rank` is this process's
  /// group rank; `what` names the operation in errors; `call` describes it
  /// as its members must agree on it (the mesh checks the pieces against it
  /// from now on); `call_buffer` is the communicator's buffer for encoding
  /// it, which the mesh swaps with the one it held (no allocation per call).
  OpContext(PeerMesh& mesh, uint32_t communicator, uint64_t sequence,
            const std::vector<int>& members, int rank, std::string what,
            std::chrono::milliseconds timeout, const CallDescription& call,
            std::string& call_buffer);
  /// Cleans up after an error (see above); a no-op after Finish().
  ~OpContext();
  OpContext(const OpContext&) = delete;
  OpContext& operator=(const OpContext&) = delete;

  int rank() const { return rank_; }
  /// Whether this operation's calls are checked (the mesh's setting).
  bool checked() const { return call_ != 0; }
  int size() const { return static_cast<int>(members_.size()); }
  const std::string& what() const { return what_; }

  /// Sends `bytes` to group rank `peer` as the piece `tag`.
  void Send(int peer, uint64_t tag, std::span<const std::byte> bytes);
  /// Posts the receive of piece `tag` from `peer` into `dest`.
  void Post(int peer, uint64_t tag, std::span<std::byte> dest);
  /// Waits for a posted receive. Throws Timeout, PeerLost, ProtocolError.
  void Wait(int peer, uint64_t tag);
  /// Waits for whichever of the posted receives `pieces` (group peer, tag)
  /// completes first; returns its index (earlier entries win when several
  /// are complete). Throws as Wait does.
  size_t WaitAny(std::span<const std::pair<int, uint64_t>> pieces);
  /// Post + Wait.
  void Receive(int peer, uint64_t tag, std::span<std::byte> dest) {
    Post(peer, tag, dest);
    Wait(peer, tag);
  }
  /// Waits until every send was handed to the kernel; throws as Wait does
  /// (a failed send is the peer's loss). Every algorithm ends with it.
  void Finish();
  /// Waits until every send so far was handed to the kernel (or read by
  /// its peer, or copied), so that its memory may change; throws as
  /// Finish does. For an algorithm that overwrites what it sent.
  void AwaitSends();
  /// Rings the doorbells of the peers whose mailbox got pieces since the
  /// last ring (every wait does this first; see PeerMesh::Send).
  void RingOwed();

  /// Throws the mesh's failure, if any, prefixed with what(); throws
  /// CallMismatch if the operation is already known to be mismatched.
  void CheckHealth();

 private:
  struct Sends {
    std::mutex mu;
    size_t outstanding = 0;
    std::exception_ptr error;
    std::set<int> failed_peers;
  };

  [[noreturn]] void Throw(PeerMesh::WaitResult r, const std::string& waiting_for);
  // Learns every member's call, fails the mesh and throws CallMismatch.
  [[noreturn]] void ThrowMismatch();
  void Cleanup() noexcept;
  MessageKey Key(uint64_t tag) const { return MessageKey{communicator_, sequence_, tag, call_}; }

  PeerMesh& mesh_;
  const uint32_t communicator_;
  const uint64_t sequence_;
  const std::vector<int>& members_;
  const int rank_;
  const std::string what_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::steady_clock::time_point deadline_;
  uint64_t call_;  // the call's fingerprint; 0: calls are not checked
  bool mismatched_at_start_ = false;
  PeerMesh::CallState* call_state_ = nullptr;  // BeginCall's, for EndCall
  std::set<std::pair<int, uint64_t>> posted_;  // (group peer, tag) not yet awaited
  std::vector<PeerMesh::SlotKey> wait_keys_;   // WaitAny's, kept to reuse its memory
  std::vector<int> owed_rings_;                // worker ranks whose doorbell is owed
  std::shared_ptr<Sends> sends_ = std::make_shared<Sends>();
  bool finished_ = false;
};

}  // namespace tandem::collective
