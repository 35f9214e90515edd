// PeerMesh, failure: a mesh connection lost without our CloseAll, or the
// membership's news of a lost node, fails the mesh; every wait then returns
// kFailed at once and every later operation fails with the same text. The
// first failure wins; later news is kept (up to 8 lines) so that an error
// can name every lost peer.
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
    text = fmt::format("lost {}: {}", Describe(link->second.rank), reason);
    if (!closing_) {
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
