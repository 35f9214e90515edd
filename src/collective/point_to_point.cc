#include "collective/point_to_point.h"

#include <fmt/format.h>

#include "collective/communicator_impl.h"
#include "tandem/error.h"

namespace tandem::collective {

namespace {

void Complete(OpState& state, std::exception_ptr error, int source = -1) {
  {
    std::lock_guard lock(state.mu);
    if (state.done) return;
    state.done = true;
    state.error = std::move(error);
    if (source >= 0) state.source = source;
  }
  state.cv.notify_all();
}

bool Done(OpState& state) {
  std::lock_guard lock(state.mu);
  return state.done;
}

}  // namespace

PointToPoint::PointToPoint(PeerMesh& mesh, uint32_t communicator, std::vector<int> members,
                           int rank, base::Logger& log)
    : mesh_(mesh),
      communicator_(communicator),
      members_(std::move(members)),
      rank_(rank),
      log_(log) {}

PointToPoint::~PointToPoint() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  mesh_.Wake();
  if (thread_.joinable()) thread_.join();
  for (auto& [id, p] : pending_) {
    if (p.is_send) continue;  // its completion belongs to the mesh's callback
    if (p.peer != kAnySource) mesh_.Abandon(Worker(p.peer), p.key);
    Complete(*p.state, std::make_exception_ptr(InvalidArgument(
                           p.what + ": the communicator was destroyed before it completed")));
  }
}

MessageKey PointToPoint::Key(uint64_t sequence, uint64_t tag) const {
  return MessageKey{communicator_, kPointToPointSequence | sequence, tag, 0};
}

void PointToPoint::CheckPeer(const std::string& what, int peer, bool any_allowed) const {
  if (any_allowed && peer == kAnySource) return;
  if (peer < 0 || peer >= static_cast<int>(members_.size())) {
    throw InvalidArgument(fmt::format("{}: rank {} is not in the group (ranks 0..{})", what, peer,
                                      members_.size() - 1));
  }
  if (peer == rank_) {
    throw InvalidArgument(
        fmt::format("{}: rank {} is this process; a message to itself is not sent", what, peer));
  }
}

void PointToPoint::StartLocked() {
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

std::shared_ptr<OpState> PointToPoint::Send(std::string what, int peer, uint64_t tag,
                                            std::span<const std::byte> bytes,
                                            std::chrono::milliseconds timeout) {
  CheckPeer(what, peer, false);
  if (auto f = mesh_.failure()) f->Throw(what + ": ");
  auto state = std::make_shared<OpState>();
  MessageKey key;
  {
    std::lock_guard lock(mu_);
    key = Key(sent_[{peer, tag}]++, tag);
    AddLocked({.what = std::move(what),
               .is_send = true,
               .peer = peer,
               .tag = tag,
               .key = key,
               .deadline = Clock::now() + timeout,
               .state = state});
  }
  Notify();
  PeerMesh* mesh = &mesh_;
  try {
    // Not ring_later: the doorbell rings at once.
    mesh_.Send(
        Worker(peer), key, bytes,
        [state, mesh](std::exception_ptr e) {
          Complete(*state, e);
          mesh->Wake();  // the progress thread forgets it
        },
        /*ring_later=*/false);
  } catch (...) {
    Complete(*state, std::current_exception());
    mesh_.Wake();
  }
  return state;
}

std::shared_ptr<OpState> PointToPoint::Receive(std::string what, int peer, uint64_t tag,
                                               std::span<std::byte> dest,
                                               std::chrono::milliseconds timeout) {
  CheckPeer(what, peer, true);
  if (auto f = mesh_.failure()) f->Throw(what + ": ");
  auto state = std::make_shared<OpState>();
  Pending p{.what = std::move(what),
            .peer = peer,
            .tag = tag,
            .dest = dest,
            .deadline = Clock::now() + timeout,
            .state = state};
  {
    std::lock_guard lock(mu_);
    if (peer != kAnySource) {
      p.key = Key(received_[{peer, tag}]++, tag);
      // Posted under mu_, so that Step never sees this receive unposted.
      mesh_.Post(Worker(peer), p.key, dest);
    }
    AddLocked(std::move(p));
  }
  Notify();
  return state;
}

void PointToPoint::AddLocked(Pending p) {
  pending_.emplace(next_id_++, std::move(p));
  fresh_ = true;  // Loop takes in its deadline
  StartLocked();
}

void PointToPoint::Notify() {
  cv_.notify_all();
  mesh_.Wake();
}

std::optional<int> PointToPoint::ArrivedSourceLocked(uint64_t tag) {
  for (int r = 0; r < static_cast<int>(members_.size()); ++r) {
    if (r != rank_ && mesh_.Ready(Worker(r), Key(received_[{r, tag}], tag))) return r;
  }
  return std::nullopt;
}

bool PointToPoint::Due() {
  std::lock_guard lock(mu_);
  if (stopping_ || fresh_) return true;
  const bool failed = mesh_.failure().has_value();
  if (failed && !failed_at_ && !pending_.empty()) return true;
  for (auto& [id, p] : pending_) {
    if (p.is_send) {
      if (Done(*p.state)) return true;
    } else if (failed) {
      return true;
    } else if (p.peer != kAnySource ? mesh_.Ready(Worker(p.peer), p.key)
                                    : ArrivedSourceLocked(p.tag).has_value()) {
      return true;
    }
  }
  return false;
}

void PointToPoint::Loop() {
  for (;;) {
    Clock::time_point deadline;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (stopping_) return;
      deadline = Clock::time_point::max();
      for (const auto& [id, p] : pending_) deadline = std::min(deadline, p.deadline);
      if (failed_at_) deadline = *failed_at_ + kSettle;
      fresh_ = false;
    }
    mesh_.WaitUntil([&] { return Due(); }, deadline);
    Step();
  }
}

void PointToPoint::Step() {
  const auto now = Clock::now();
  std::unique_lock lock(mu_);
  const std::optional<MeshFailure> failure = mesh_.failure();
  for (auto it = pending_.begin(); it != pending_.end();) {
    Pending& p = it->second;
    if (p.is_send) {
      if (Done(*p.state)) {
        it = pending_.erase(it);
        continue;
      }
      if (failure) {
        // Sends end when written, or fail when their connection closes; a
        // peer that stopped reading gets every connection closed.
        if (!failed_at_) failed_at_ = now;
        if (now >= *failed_at_ + kSettle && !closed_all_) {
          closed_all_ = true;
          lock.unlock();
          mesh_.CloseAll();
          return;
        }
      } else if (now >= p.deadline) {
        Pending copy = p;
        lock.unlock();
        FailOnTimeout(copy);
        return;  // the next Step sees the failure
      }
      ++it;
      continue;
    }
    if (p.peer == kAnySource) {
      if (std::optional<int> r = ArrivedSourceLocked(p.tag)) {
        p.peer = *r;
        p.key = Key(received_[{*r, p.tag}]++, p.tag);
        mesh_.Post(Worker(*r), p.key, p.dest);
      }
    }
    if (p.peer != kAnySource && mesh_.Ready(Worker(p.peer), p.key)) {
      // Ready: Wait returns at once (it copies a same-host piece itself).
      std::exception_ptr error;
      try {
        const auto r = mesh_.Wait(Worker(p.peer), p.key, now);
        if (r != PeerMesh::WaitResult::kDone) {
          if (auto f = mesh_.failure()) f->Throw(p.what + ": ");
          throw ProtocolError(p.what + ": the message was lost");
        }
      } catch (...) {
        error = std::current_exception();
      }
      Complete(*p.state, error, p.peer);
      it = pending_.erase(it);
      continue;
    }
    if (failure) {
      if (p.peer != kAnySource) mesh_.Abandon(Worker(p.peer), p.key);
      try {
        failure->Throw(p.what + ": ");
      } catch (...) {
        Complete(*p.state, std::current_exception());
      }
      it = pending_.erase(it);
      continue;
    }
    if (now >= p.deadline) {
      Pending copy = p;
      lock.unlock();
      FailOnTimeout(copy);
      return;
    }
    ++it;
  }
}

void PointToPoint::FailOnTimeout(const Pending& p) {
  const std::string from =
      p.is_send ? fmt::format("rank {} did not take it", p.peer)
      : p.peer == kAnySource
          ? std::string("no member sent it")
          : fmt::format("rank {} (worker {}) did not send it", p.peer, Worker(p.peer));
  const std::string text = fmt::format(
      "{} (tag {}) timed out: {} (TANDEM_COLLECTIVE_TIMEOUT or the call's timeout); the "
      "two sides' messages are out of step now, so the group fails",
      p.what, p.tag, from);
  log_.Error("{}", text);
  mesh_.Fail(FailureKind::kTimeout, text);
  // A same-host peer never copies now: its sender lets go of the memory.
  mesh_.ReleaseUncopiedRefs();
}

}  // namespace tandem::collective
