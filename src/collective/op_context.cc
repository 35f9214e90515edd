#include "collective/op_context.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "tandem/error.h"

namespace tandem::collective {

OpContext::OpContext(PeerMesh& mesh, uint32_t communicator, uint64_t sequence,
                     const std::vector<int>& members, int rank, std::string what,
                     std::chrono::milliseconds timeout, const CallDescription& call,
                     std::string& call_buffer)
    : mesh_(mesh),
      communicator_(communicator),
      sequence_(sequence),
      members_(members),
      rank_(rank),
      what_(std::move(what)),
      timeout_(timeout),
      deadline_(std::chrono::steady_clock::now() + timeout),
      call_(0) {
  if (mesh.call_checks()) {
    const PeerMesh::Begun begun = mesh_.BeginCall(communicator_, sequence_, call, call_buffer);
    call_ = begun.fingerprint;
    call_state_ = begun.state;
    mismatched_at_start_ = !begun.fine;
  }
}

OpContext::~OpContext() {
  RingOwed();
  if (!finished_) Cleanup();
  if (call_state_ != nullptr) PeerMesh::EndCall(call_state_, finished_);
}

void OpContext::RingOwed() {
  for (int worker : owed_rings_) mesh_.Ring(worker);
  owed_rings_.clear();
}

void OpContext::CheckHealth() {
  // A mismatch first: members that raised it may exit, and their loss is
  // its consequence, not its cause.
  if (mismatched_at_start_ || (call_ != 0 && mesh_.CallMismatched(communicator_, sequence_))) {
    ThrowMismatch();
  }
  // 200 ms lets the news of every lost peer arrive, so that the error names
  // the dead worker even when the first news is of a worker that exited
  // because of it.
  if (mesh_.failure()) {
    mesh_.ReleaseUncopiedRefs();
    mesh_.SettledFailure(std::chrono::milliseconds(200))->Throw(what_ + " failed: ");
  }
  // A worker left an elastic job: this communicator is retired.
  if (auto change = mesh_.Retired(communicator_)) {
    throw MembershipChanged(
        fmt::format("{} abandoned: {}; the collectives go on once the remaining workers regroup "
                    "(Collectives::Regroup, tandem.regroup(); docs/elastic.md)",
                    what_, *change));
  }
}

void OpContext::ThrowMismatch() {
  const std::string text = mesh_.ResolveMismatch(communicator_, sequence_);
  mesh_.Fail(FailureKind::kMismatch, text);
  throw CallMismatch(text);
}

OpContext::Narrowed OpContext::Narrow(std::vector<int> group_ranks, int stage) {
  if (!view_.empty()) throw InvalidArgument(what_ + ": narrowed twice");
  if (stage < 1 || stage > 15) {
    throw InvalidArgument(fmt::format("{}: sub-group stage {} is outside 1..15", what_, stage));
  }
  const auto self = std::find(group_ranks.begin(), group_ranks.end(), rank_);
  if (self == group_ranks.end()) {
    throw InvalidArgument(fmt::format("{}: group rank {} is not in the sub-group [{}]", what_,
                                      rank_, fmt::join(group_ranks, ", ")));
  }
  for (int r : group_ranks) {
    if (r < 0 || r >= group_size()) {
      throw InvalidArgument(
          fmt::format("{}: sub-group rank {} is outside the group of {}", what_, r, group_size()));
    }
  }
  view_rank_ = static_cast<int>(self - group_ranks.begin());
  view_ = std::move(group_ranks);
  stage_bits_ = uint64_t{static_cast<uint32_t>(stage)} << 52;
  return Narrowed(*this);
}

void OpContext::Widen() {
  view_.clear();
  view_rank_ = 0;
  stage_bits_ = 0;
}

void OpContext::Send(int peer_in, uint64_t tag_in, std::span<const std::byte> bytes) {
  // Not a structured binding: the callback below captures the peer.
  const std::pair<int, uint64_t> full = Full(peer_in, tag_in);
  const int peer = full.first;
  const uint64_t tag = full.second;
  {
    std::lock_guard lock(sends_->mu);
    ++sends_->outstanding;
  }
  std::shared_ptr<Sends> sends = sends_;
  PeerMesh* mesh = &mesh_;
  const int worker = members_[static_cast<size_t>(peer)];
  const bool owed = mesh_.Send(
      worker, Key(tag), bytes,
      [sends, peer, mesh](std::exception_ptr e) {
        bool settled = false;
        {
          std::lock_guard lock(sends->mu);
          --sends->outstanding;
          if (e) {
            if (!sends->error) sends->error = e;
            sends->failed_peers.insert(peer);
          }
          settled = sends->outstanding == 0 || e != nullptr;
        }
        // Finish and Cleanup wait on the mesh's doorbell.
        if (settled) mesh->Wake();
      },
      /*ring_later=*/true);
  if (owed && std::find(owed_rings_.begin(), owed_rings_.end(), worker) == owed_rings_.end()) {
    owed_rings_.push_back(worker);
  }
}

void OpContext::Post(int peer_in, uint64_t tag_in, std::span<std::byte> dest) {
  const auto [peer, tag] = Full(peer_in, tag_in);
  mesh_.Post(members_[static_cast<size_t>(peer)], Key(tag), dest);
  posted_.emplace(peer, tag);
}

void OpContext::Wait(int peer_in, uint64_t tag_in) {
  const auto [peer, tag] = Full(peer_in, tag_in);
  RingOwed();
  auto r = mesh_.Wait(members_[static_cast<size_t>(peer)], Key(tag), deadline_);
  if (r == PeerMesh::WaitResult::kDone) {
    posted_.erase({peer, tag});
    return;
  }
  Throw(r, "");
}

size_t OpContext::WaitAny(std::span<const std::pair<int, uint64_t>> pieces) {
  RingOwed();
  wait_keys_.clear();
  for (const auto& [peer_in, tag_in] : pieces) {
    const auto [peer, tag] = Full(peer_in, tag_in);
    wait_keys_.push_back(PeerMesh::SlotKey{members_[static_cast<size_t>(peer)], Key(tag)});
  }
  auto [r, index] = mesh_.WaitAny(wait_keys_, deadline_);
  if (r == PeerMesh::WaitResult::kDone) {
    posted_.erase(Full(pieces[index].first, pieces[index].second));
    return index;
  }
  Throw(r, "");
}

void OpContext::Finish() {
  AwaitSends();
  // The last word: news of a mismatch that comes after this fails the mesh
  // (the next operation raises) instead of this one.
  if (call_state_ != nullptr && !PeerMesh::CompleteCall(call_state_)) ThrowMismatch();
  finished_ = true;
}

void OpContext::AwaitSends() {
  RingOwed();
  {
    const bool in_time = mesh_.WaitUntil(
        [&] {
          if (call_ != 0 && mesh_.CallMismatched(communicator_, sequence_)) return true;
          if (mesh_.Retired(communicator_)) return true;
          std::lock_guard lock(sends_->mu);
          return sends_->outstanding == 0 || sends_->error != nullptr;
        },
        deadline_);
    if (call_ != 0 && mesh_.CallMismatched(communicator_, sequence_)) ThrowMismatch();
    if (mesh_.Retired(communicator_)) CheckHealth();
    std::unique_lock lock(sends_->mu);
    if (in_time && !sends_->error) return;
    if (!in_time) {
      lock.unlock();
      Throw(PeerMesh::WaitResult::kTimedOut, " (sends to them not completed)");
    }
  }
  // A send failed: its connection is gone, which is the peer's loss. In an
  // elastic job the scheduler's verdict says whether the job goes on
  // without that peer (this communicator is then retired) or fails.
  if (mesh_.elastic()) {
    const auto verdict =
        std::min(deadline_, std::chrono::steady_clock::now() + mesh_.verdict_wait());
    mesh_.WaitUntil([&] { return mesh_.failure() || mesh_.Retired(communicator_); }, verdict);
  }
  CheckHealth();
  std::string peers;
  for (int p : sends_->failed_peers) peers += (peers.empty() ? "" : ", ") + std::to_string(p);
  std::string text;
  try {
    std::rethrow_exception(sends_->error);
  } catch (const std::exception& e) {
    text = e.what();
  }
  mesh_.Fail(FailureKind::kPeerLost,
             fmt::format("sending to group rank(s) {} failed: {}", peers, text));
  CheckHealth();
  throw PeerLost(what_ + " failed: " + text);
}

void OpContext::Throw(PeerMesh::WaitResult r, const std::string& waiting_for) {
  if (r == PeerMesh::WaitResult::kMismatch) ThrowMismatch();
  if (r == PeerMesh::WaitResult::kFailed) CheckHealth();
  // Timed out: name the ranks whose pieces are missing.
  std::set<int> missing;
  for (const auto& [peer, tag] : posted_) {
    if (!mesh_.Complete(members_[static_cast<size_t>(peer)], Key(tag))) missing.insert(peer);
  }
  {
    std::lock_guard lock(sends_->mu);
    if (missing.empty() && sends_->outstanding > 0) {
      for (int p = 0; p < group_size(); ++p) {
        if (p != rank_) missing.insert(p);
      }
    }
  }
  std::string ranks;
  for (int p : missing) {
    ranks += (ranks.empty() ? "" : ", ") +
             fmt::format("{} (worker {})", p, members_[static_cast<size_t>(p)]);
  }
  std::string text = fmt::format(
      "{} timed out after {} ms (TANDEM_COLLECTIVE_TIMEOUT or the operation's timeout); "
      "not heard from group rank(s) {}{}",
      what_, timeout_.count(), ranks.empty() ? "?" : ranks, waiting_for);
  // Late pieces could land in memory the caller reuses: the mesh is done.
  mesh_.Fail(FailureKind::kTimeout, text);
  throw Timeout(text);
}

void OpContext::Cleanup() noexcept {
  try {
    bool pending = !posted_.empty();
    {
      std::lock_guard lock(sends_->mu);
      pending = pending || sends_->outstanding > 0;
    }
    if (!pending) return;
    if (!mesh_.failure() && !mesh_.Retired(communicator_)) {
      mesh_.Fail(FailureKind::kProtocol,
                 fmt::format("{} was abandoned with pieces in flight", what_));
    }
    for (const auto& [peer, tag] : posted_)
      mesh_.Abandon(members_[static_cast<size_t>(peer)], Key(tag));
    posted_.clear();
    // Sends end when written, or fail when their connection closes; a peer
    // that stopped reading altogether gets every connection closed.
    auto settled = [&] {
      std::lock_guard lock(sends_->mu);
      return sends_->outstanding == 0;
    };
    // An operation abandoned by a change of an elastic job's members
    // waits for its peers' answers as long as the operation may last: a
    // peer answers a piece sent by reference once it waits on the mesh
    // again (its next collective call, or its regroup), and closing the
    // links would end the collectives of every remaining worker.
    const auto now = std::chrono::steady_clock::now();
    const auto patience =
        mesh_.Retired(communicator_)
            ? std::max<std::chrono::milliseconds>(timeout_, std::chrono::seconds(10))
            : std::chrono::milliseconds(std::chrono::seconds(10));
    if (!mesh_.WaitUntil(settled, now + patience)) {
      mesh_.CloseAll();
      mesh_.WaitUntil(settled, std::chrono::steady_clock::now() + std::chrono::seconds(30));
    }
  } catch (...) {
    // Cleanup runs while an exception propagates; nothing more can be done.
  }
}

}  // namespace tandem::collective
