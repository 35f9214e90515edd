// PeerMesh, failure: a mesh connection lost without our CloseAll, or the
// membership's news of a lost node, fails the mesh; every wait then returns
// kFailed at once and every later operation fails with the same text. The
// first failure wins; later news is kept (up to 8 lines) so that an error
// can name every lost peer.
//
// In an elastic job (docs/elastic.md, "Elastic collectives") a lost link
// waits for the scheduler's verdict instead: the worker left
// (ChangeMembership retires the communicators made before, and the mesh
// goes on), the job failed (Fail), or no verdict came within
// Options::verdict_wait (the mesh fails as a fixed one does).
#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "collective/peer_mesh.h"
#include "tandem/error.h"

namespace tandem::collective {

void PeerMesh::Fail(FailureKind kind, const std::string& text) {
  {
    std::lock_guard lock(mu_);
    FailLocked(kind, text);
  }
  Wake();
  ReleaseUncopiedRefs();
}

void PeerMesh::FailLocked(FailureKind kind, const std::string& text) {
  if (!failure_) {
    failure_ = MeshFailure{kind, text, {}, Clock::now()};
    return;
  }
  if (failure_->later.size() < 8 && text != failure_->text &&
      std::find(failure_->later.begin(), failure_->later.end(), text) == failure_->later.end()) {
    failure_->later.push_back(text);
  }
}

std::optional<MeshFailure> PeerMesh::SettledFailure(std::chrono::milliseconds settle) const {
  std::unique_lock lock(mu_);
  if (!failure_) return std::nullopt;
  const auto until = failure_->when + settle;
  if (Clock::now() < until) {
    lock.unlock();
    std::this_thread::sleep_until(until);
    lock.lock();
  }
  return failure_;
}

std::optional<MeshFailure> PeerMesh::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

void PeerMesh::OnDisconnected(net::ConnectionId id, const std::string& reason) {
  std::vector<std::function<void(std::exception_ptr)>> refs;
  std::string text;
  {
    std::lock_guard lock(mu_);
    auto link = links_.find(id);
    if (link == links_.end()) return;
    link->second.open = false;
    const int rank = link->second.rank;
    text = fmt::format("lost {}: {}", Describe(rank), reason);
    const bool departed = rank >= 0 && static_cast<size_t>(rank) < departed_.size() &&
                          departed_[static_cast<size_t>(rank)];
    if (elastic_ && !closing_) {
      // The scheduler decides: the worker left (ChangeMembership) or the
      // job failed; until then waits on that worker go on.
      if (!departed && lost_links_.emplace(rank, std::pair{text, Clock::now()}).second) {
        log_.V1("{}; waiting up to {} ms for the scheduler's verdict (elastic job)", text,
                options_.verdict_wait.count());
      }
    } else if (!closing_) {
      const bool first = !failure_;
      FailLocked(FailureKind::kPeerLost, text);
      // The caller's operation raises it; the process's one log line of a
      // lost node is the membership's (cluster/membership.cc), so a loss
      // found here first is logged only with PS_VERBOSE.
      if (first && !slots_.empty()) log_.V1("{}", failure_->text);
    }
    // Pieces sent by reference to that peer will not be answered now.
    refs = TakeRefsLocked(link->second.rank);
  }
  Wake();
  if (!refs.empty()) {
    auto error = std::make_exception_ptr(PeerLost(text));
    for (auto& f : refs) f(error);
  }
  ReleaseUncopiedRefs();
}

void PeerMesh::ChangeMembership(uint32_t epoch, int departed, const std::string& text) {
  std::vector<std::pair<int, std::pair<net::ConnectionId, MessageKey>>> release;
  std::vector<net::ConnectionId> close;
  {
    std::lock_guard lock(mu_);
    if (epoch <= epoch_seen_.load(std::memory_order_relaxed)) return;
    changes_[epoch] = text;
    epoch_seen_.store(epoch, std::memory_order_release);
    if (departed >= 0 && static_cast<size_t>(departed) < departed_.size()) {
      departed_[static_cast<size_t>(departed)] = 1;
      lost_links_.erase(departed);
      for (const auto& [id, link] : links_) {
        if (link.rank == departed && link.open) close.push_back(id);
      }
    }
    // What arrived for the retired communicators and no operation posted:
    // dropped; a piece sent by reference is answered uncopied.
    for (auto it = slots_.begin(); it != slots_.end();) {
      const bool unposted = !it->second.posted && (it->second.state == Slot::State::kArrived ||
                                                   it->second.state == Slot::State::kRef);
      if (!unposted || !RetiredLocked(it->first.key.communicator)) {
        ++it;
        continue;
      }
      if (it->second.state == Slot::State::kRef && it->first.peer != departed) {
        release.push_back({it->first.peer, {it->second.ref_link, it->first.key}});
      }
      it = slots_.erase(it);
    }
    std::erase_if(early_, [&](const EarlyPiece& e) { return RetiredLocked(e.communicator); });
  }
  for (const auto& [peer, ref] : release) SendRefDone(peer, ref.first, ref.second);
  // Its late pieces would be dropped anyway; a frozen worker that wakes
  // finds its links closed.
  for (net::ConnectionId id : close) transport_.Close(id);
  Wake();
}

bool PeerMesh::RetiredLocked(uint32_t communicator) const {
  const uint32_t now = epoch_seen_.load(std::memory_order_relaxed);
  if (now == 0) return false;
  auto it = calls_.find(communicator);
  return it != calls_.end() && !it->second.members.empty() && it->second.epoch < now;
}

std::optional<std::string> PeerMesh::Retired(uint32_t communicator) const {
  if (epoch_seen_.load(std::memory_order_acquire) == 0) return std::nullopt;
  std::lock_guard lock(mu_);
  if (!RetiredLocked(communicator)) return std::nullopt;
  // The first change after the communicator's epoch retired it.
  auto change = changes_.upper_bound(calls_.at(communicator).epoch);
  if (change == changes_.end()) return std::nullopt;
  return change->second;
}

bool PeerMesh::Departed(int rank) const {
  std::lock_guard lock(mu_);
  return rank >= 0 && static_cast<size_t>(rank) < departed_.size() &&
         departed_[static_cast<size_t>(rank)];
}

void PeerMesh::CheckVerdictsLocked() {
  const auto now = Clock::now();
  for (const auto& [rank, lost] : lost_links_) {
    if (now - lost.second >= options_.verdict_wait) {
      FailLocked(FailureKind::kPeerLost,
                 fmt::format("{}, and the scheduler did not let the elastic job go on without "
                             "worker {} within {} ms",
                             lost.first, rank, options_.verdict_wait.count()));
    }
  }
}

void PeerMesh::CloseAll() {
  std::vector<net::ConnectionId> ids;
  {
    std::lock_guard lock(mu_);
    if (closing_) return;
    closing_ = true;
    for (const auto& [id, link] : links_) {
      if (link.open) ids.push_back(id);
    }
  }
  for (net::ConnectionId id : ids) transport_.Close(id);
}

}  // namespace tandem::collective
