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

  /// This process's rank and the group's size; while narrowed (Narrow),
  /// those of the sub-group.
  int rank() const { return view_.empty() ? rank_ : view_rank_; }
  /// Whether this operation's calls are checked (the mesh's setting).
  bool checked() const { return call_ != 0; }
  int size() const { return view_.empty() ? group_size() : static_cast<int>(view_.size()); }
  /// The whole group's size, narrowed or not.
  int group_size() const { return static_cast<int>(members_.size()); }

  /// Restores the whole group when destroyed (see Narrow).
  class Narrowed {
   public:
    explicit Narrowed(OpContext& ctx) : ctx_(ctx) {}
    ~Narrowed() { ctx_.Widen(); }
    Narrowed(const Narrowed&) = delete;
    Narrowed& operator=(const Narrowed&) = delete;

   private:
    OpContext& ctx_;
  };
  /// Until the returned guard is destroyed, rank(), size() and the peers of
  /// Send, Post, Wait and WaitAny refer to the sub-group `group_ranks`
  /// (ranks of the whole group, this rank among them; sub-group rank i is
  /// group_ranks[i]), and every tag is marked with `stage` (1..15), so that
  /// an algorithm can run other algorithms on sub-groups in turn
  /// (hierarchical_allreduce.cc) with pieces that stay distinct. Errors
  /// still name ranks of the whole group. Throws InvalidArgument when this
  /// rank is not in `group_ranks`, a rank is outside the group, the stage
  /// is outside 1..15, or the context is already narrowed.
  [[nodiscard]] Narrowed Narrow(std::vector<int> group_ranks, int stage);
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
  void Widen();
  MessageKey Key(uint64_t tag) const { return MessageKey{communicator_, sequence_, tag, call_}; }
  // A peer and tag as the caller names them (narrowed or not) -> the whole
  // group's rank and the tag marked with the stage.
  std::pair<int, uint64_t> Full(int peer, uint64_t tag) const {
    if (view_.empty()) return {peer, tag};
    return {view_[static_cast<size_t>(peer)], tag | stage_bits_};
  }

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
  std::vector<int> view_;    // Narrow's sub-group (group ranks); empty: the whole group
  int view_rank_ = 0;        // this rank in view_
  uint64_t stage_bits_ = 0;  // Narrow's stage, in the top bits of a tag's step
  std::set<std::pair<int, uint64_t>> posted_;  // (group peer, full tag) not yet awaited
  std::vector<PeerMesh::SlotKey> wait_keys_;   // WaitAny's, kept to reuse its memory
  std::vector<int> owed_rings_;                // worker ranks whose doorbell is owed
  std::shared_ptr<Sends> sends_ = std::make_shared<Sends>();
  bool finished_ = false;
};

}  // namespace tandem::collective
