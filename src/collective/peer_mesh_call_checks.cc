// PeerMesh, call checks (docs/collectives.md "Call checks"): every piece
// carries the fingerprint of its sender's description of the operation
// (MessageKey::call). A piece whose fingerprint differs from this process's
// own for that operation is dropped unused and marks the operation
// mismatched; a piece that arrives before its operation began is checked
// when it begins. The members then exchange kCallNotice so that each can
// name every rank's call. A wait that has lasted kCrossWait while the peer
// it waits for has begun an operation of another communicator that this
// process has not (and is not running one of) reports the crossed order.
#include <fmt/format.h>
#include <time.h>

#include <algorithm>

#include "collective/peer_mesh.h"
#include "tandem/error.h"

namespace tandem::collective {

namespace {

// The stamps the crossed-order check compares with kCrossWait (400 ms) are
// taken on every operation and early piece: the kernel's coarse monotonic
// clock (the same clock, at most one tick behind, no counter read) costs
// a quarter of steady_clock::now().
std::chrono::steady_clock::time_point CoarseNow() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::chrono::steady_clock::time_point(std::chrono::seconds(ts.tv_sec) +
                                               std::chrono::nanoseconds(ts.tv_nsec));
}

}  // namespace

PeerMesh::CallState* PeerMesh::RegisterCommunicator(uint32_t communicator,
                                                    const std::vector<int>& members,
                                                    uint32_t epoch) {
  std::lock_guard lock(mu_);
  CallState& st = calls_[communicator];
  st.members = members;
  st.epoch = epoch;
  if (!st.begun) st.idle_since.store(Clock::now().time_since_epoch().count());
  return &st;
}

PeerMesh::Begun PeerMesh::BeginCall(uint32_t communicator, uint64_t sequence,
                                    const CallDescription& call, std::string& buffer) {
  // Encoded before the lock: the receiving threads take it for every piece.
  const uint64_t fingerprint = call.EncodeInto(buffer);
  std::lock_guard lock(mu_);
  CallState& st = calls_[communicator];
  st.begun = true;
  st.status.store(CallState::kRunning);
  st.sequence = sequence;
  st.probed.clear();
  st.blocked_peers.clear();
  st.fingerprint = fingerprint;
  st.description.swap(buffer);
  if (!early_.empty()) {
    // What arrived for this operation is checked now; for earlier ones, it
    // is stale.
    std::erase_if(early_, [&](const EarlyPiece& e) {
      if (e.communicator != communicator || e.sequence > sequence) return false;
      if (e.sequence == sequence && e.call != st.fingerprint) {
        log_.V1(
            "early collective piece from {} for operation {} of communicator {} carries "
            "call {:#x}, this rank's is {:#x}",
            Describe(e.peer), sequence, communicator, e.call, st.fingerprint);
        MarkMismatchLocked(communicator, st, sequence,
                           fmt::format("{} sent a piece with another call", Describe(e.peer)));
      }
      return true;
    });
  }
  if (st.mismatch == sequence) st.status.store(CallState::kMismatched);
  return {&st, st.fingerprint, st.mismatch != sequence};
}

void PeerMesh::EndCall(CallState* state, bool completed) {
  state->idle_since.store(CoarseNow().time_since_epoch().count(), std::memory_order_relaxed);
  if (completed) return;  // CompleteCall set it idle
  uint8_t running = CallState::kRunning;
  state->status.compare_exchange_strong(running, CallState::kIdle);
}

bool PeerMesh::CompleteCall(CallState* state) {
  uint8_t running = CallState::kRunning;
  return state->status.compare_exchange_strong(running, CallState::kIdle) ||
         running == CallState::kIdle;
}

bool PeerMesh::AdmitLocked(int peer, const MessageKey& key) {
  // A retired communicator's pieces (elastic jobs) are dropped unused.
  if (RetiredLocked(key.communicator)) return false;
  if (!call_checks() || (key.sequence & kPointToPointSequence) != 0) return true;
  auto it = calls_.find(key.communicator);
  if (it != calls_.end() && it->second.begun && it->second.sequence == key.sequence) {
    CallState& st = it->second;
    if (st.mismatch == key.sequence) return false;
    if (key.call == st.fingerprint) return true;
    log_.V1(
        "collective piece from {} for operation {} of communicator {} carries call {:#x}, "
        "this rank's is {:#x}",
        Describe(peer), key.sequence, key.communicator, key.call, st.fingerprint);
    MarkMismatchLocked(key.communicator, st, key.sequence,
                       fmt::format("{} sent a piece with another call", Describe(peer)));
    return false;
  }
  if (it == calls_.end() || !it->second.begun || key.sequence > it->second.sequence) {
    const bool known = std::any_of(early_.begin(), early_.end(), [&](const EarlyPiece& e) {
      return e.communicator == key.communicator && e.sequence == key.sequence && e.peer == peer;
    });
    if (!known && early_.size() >= kMaxEarlyOperations) {
      const std::string text = fmt::format(
          "{} sent pieces of more than {} operations this worker has not begun (communicator {}, "
          "operation {})",
          Describe(peer), kMaxEarlyOperations, key.communicator, key.sequence);
      log_.Error("{}", text);
      FailLocked(FailureKind::kProtocol, text);
      Bell().Ring();
      cv_.notify_all();
      return false;
    }
    if (!known) early_.push_back({key.communicator, key.sequence, peer, key.call, CoarseNow()});
  }
  return true;
}

void PeerMesh::MarkMismatchLocked(uint32_t communicator, CallState& st, uint64_t sequence,
                                  const std::string& why, std::string abort_text) {
  if (st.begun && sequence <= st.sequence) {
    uint8_t running = CallState::kRunning;
    const bool current = sequence == st.sequence &&
                         (st.status.compare_exchange_strong(running, CallState::kMismatched) ||
                          running == CallState::kMismatched);
    if (!current) {
      FailCompletedLocked(communicator, st, sequence, why);
      return;
    }
  }
  if (!st.mismatch) {
    st.mismatch = sequence;
    st.mismatch_at = Clock::now();
    any_mismatch_.store(true, std::memory_order_release);
  }
  if (st.mismatch == sequence && st.abort_text.empty()) st.abort_text = std::move(abort_text);
  Bell().Ring();
  cv_.notify_all();
}

void PeerMesh::FailCompletedLocked(uint32_t communicator, const CallState& st, uint64_t sequence,
                                   const std::string& why) {
  std::string text =
      fmt::format("{}: operation {} of communicator {}, which this rank had completed", why,
                  sequence, CommunicatorName(communicator, st.members));
  if (sequence == st.sequence) {
    text += " as " + CallDescription::Decode(st.description).Summary();
  }
  log_.Error("{}", text);
  FailLocked(FailureKind::kMismatch, text);
  Bell().Ring();
  cv_.notify_all();
}

bool PeerMesh::CallMismatched(uint32_t communicator, uint64_t sequence) const {
  if (!any_mismatch_.load(std::memory_order_acquire)) return false;
  std::lock_guard lock(mu_);
  auto it = calls_.find(communicator);
  return it != calls_.end() && it->second.mismatch == sequence;
}

std::string PeerMesh::ResolveMismatch(uint32_t communicator, uint64_t sequence) {
  std::vector<std::pair<int, CallNotice>> notices;
  std::chrono::steady_clock::time_point until;
  std::vector<int> members;
  {
    std::lock_guard lock(mu_);
    CallState& st = calls_[communicator];
    members = st.members;
    until = st.mismatch_at + kMismatchPatience;
    if (!st.notified) {
      st.notified = true;
      CallNotice n{communicator, sequence, NoticeKind::kDescription, sequence, st.description, {}};
      for (int m : members) {
        if (m != self_rank_) notices.emplace_back(m, n);
      }
    }
  }
  SendNotices(notices);
  auto heard_all = [&] {
    std::lock_guard lock(mu_);
    const CallState& st = calls_[communicator];
    if (!st.abort_text.empty()) return true;
    for (int m : st.members) {
      if (m == self_rank_) continue;
      auto it = st.notices.find(m);
      if (it == st.notices.end() || it->second.kind != NoticeKind::kDescription) return false;
    }
    return true;
  };
  WaitUntil(heard_all, until);
  std::lock_guard lock(mu_);
  const CallState& st = calls_[communicator];
  if (!st.abort_text.empty()) return st.abort_text;
  std::vector<MemberCall> calls(members.size());
  for (size_t g = 0; g < members.size(); ++g) {
    MemberCall& mc = calls[g];
    if (members[g] == self_rank_) {
      mc.call = CallDescription::Decode(st.description);
      mc.reached = true;
      mc.at = sequence;
      continue;
    }
    auto it = st.notices.find(members[g]);
    if (it == st.notices.end()) continue;
    const CallNotice& n = it->second;
    mc.reached = n.kind == NoticeKind::kDescription && n.at == sequence;
    mc.at = n.at;
    if (!n.description.empty()) mc.call = CallDescription::Decode(n.description);
  }
  return MismatchMessage(communicator, members, sequence, calls);
}

std::optional<std::string> PeerMesh::CrossedOrderLocked(
    std::span<const SlotKey> pieces, std::vector<std::pair<int, CallNotice>>& out) {
  const uint32_t communicator = pieces.front().key.communicator;
  const uint64_t sequence = pieces.front().key.sequence;
  const auto now = Clock::now();
  CallState& mine = calls_[communicator];
  if (mine.sequence != sequence || !mine.begun) return std::nullopt;
  // Only a caller blocked here makes a crossing a deadlock: a caller that
  // goes on may still make the other communicator's call.
  int blocked_here = 0;
  for (const auto& [id, st] : calls_) blocked_here += st.user_waits.load();
  if (blocked_here == 0) return std::nullopt;
  // The members this operation needs: the peers of its pending pieces and,
  // unless it is a broadcast (whose result comes down the root's path only),
  // every other member, whose input reaches this rank's result through some
  // peer. Halving-doubling and recursive doubling wait for partners only; in
  // a crossing the member blocked in the other communicator may be one this
  // rank never waits for (4 workers, a group of three beside the world).
  std::vector<int> needed;
  for (const SlotKey& piece : pieces) {
    auto slot = slots_.find(piece);
    if (slot != slots_.end() && slot->second.state != Slot::State::kPosted) continue;
    if (std::find(needed.begin(), needed.end(), piece.peer) == needed.end()) {
      needed.push_back(piece.peer);
    }
  }
  if (needed.empty()) return std::nullopt;
  if (!mine.description.empty() &&
      CallDescription::Decode(mine.description).kind != CallKind::kBroadcast) {
    for (int m : mine.members) {
      if (m != self_rank_ && std::find(needed.begin(), needed.end(), m) == needed.end()) {
        needed.push_back(m);
      }
    }
  }
  for (const int peer : needed) {
    for (const EarlyPiece& early : early_) {
      const uint32_t other = early.communicator;
      const uint64_t other_sequence = early.sequence;
      if (other == communicator || early.peer != peer || now - early.at < kCrossWait) {
        continue;
      }
      auto st = calls_.find(other);
      // A caller counted as blocked in `other` has called it, even before
      // its operation begins there (Run counts the wait first).
      const bool idle =
          st == calls_.end() ||
          (st->second.status.load() != CallState::kRunning && st->second.user_waits.load() == 0 &&
           now - Clock::time_point(Clock::duration(st->second.idle_since.load())) >= kCrossWait &&
           (!st->second.begun || st->second.sequence < other_sequence));
      if (!idle) continue;
      auto blocked = mine.blocked_peers.find(peer);
      if (blocked == mine.blocked_peers.end() || blocked->second != sequence) {
        // Is the peer's caller blocked too? Ask (again after kCrossWait).
        auto asked = mine.probed.find(peer);
        if (asked == mine.probed.end() || now - asked->second >= kCrossWait) {
          mine.probed[peer] = now;
          out.emplace_back(peer, CallNotice{communicator, sequence, NoticeKind::kProbe, 0, {}, {}});
        }
        continue;
      }
      const std::vector<int> other_members =
          st == calls_.end() ? std::vector<int>{} : st->second.members;
      const std::string text = fmt::format(
          "{} at operation {} of communicator {} waits for {}, which is blocked in operation {} "
          "of communicator {} (its pieces arrived {} ms ago); worker rank {} has not called that "
          "operation: the ranks call their communicators in different orders",
          CallDescription::Decode(mine.description).Summary(), sequence,
          CommunicatorName(communicator, mine.members), Describe(peer), other_sequence,
          CommunicatorName(other, other_members),
          std::chrono::duration_cast<std::chrono::milliseconds>(now - early.at).count(),
          self_rank_);
      MarkMismatchLocked(communicator, mine, sequence, text, text);
      mine.notified = true;
      for (int m : mine.members) {
        if (m != self_rank_) {
          out.emplace_back(m, CallNotice{communicator, sequence, NoticeKind::kAbort, sequence,
                                         mine.description, text});
        }
      }
      // The peer's operation cannot complete either: its members learn why.
      const std::vector<int> told = other_members.empty() ? std::vector<int>{peer} : other_members;
      for (int m : told) {
        if (m != self_rank_) {
          out.emplace_back(m, CallNotice{other, other_sequence, NoticeKind::kAbort, 0, {}, text});
        }
      }
      return text;
    }
  }
  return std::nullopt;
}

void PeerMesh::OnCallNotice(net::ConnectionId id, const net::Message& m) {
  CallNotice n = CallNotice::Decode(m.meta);
  std::vector<std::pair<int, CallNotice>> replies;
  {
    std::lock_guard lock(mu_);
    auto link = links_.find(id);
    if (link == links_.end()) {
      throw ProtocolError("a collective call notice on a connection that sent no hello");
    }
    const int peer = link->second.rank;
    // News of a retired communicator (elastic jobs) changes nothing.
    if (RetiredLocked(n.communicator)) return;
    if (!calls_.count(n.communicator) && calls_.size() >= kMaxCommunicators) {
      log_.Warn(
          "a call notice from {} about communicator {} is ignored: this process knows {} "
          "communicators already",
          Describe(peer), n.communicator, calls_.size());
      return;
    }
    CallState& st = calls_[n.communicator];
    if (n.kind == NoticeKind::kProbe) {
      // Blocked: a caller of this process waits in another communicator,
      // and this process does not run the asker's operation.
      int blocked_elsewhere = 0;
      for (const auto& [other, state] : calls_) {
        if (other != n.communicator) blocked_elsewhere += state.user_waits.load();
      }
      const bool running =
          st.begun && st.sequence >= n.sequence && st.status.load() == CallState::kRunning;
      replies.emplace_back(peer, CallNotice{n.communicator,
                                            n.sequence,
                                            NoticeKind::kProbeReply,
                                            blocked_elsewhere > 0 && !running ? 1u : 0u,
                                            {},
                                            {}});
    } else if (n.kind == NoticeKind::kProbeReply) {
      if (n.at == 1 && st.begun && st.sequence == n.sequence) st.blocked_peers[peer] = n.sequence;
    } else {
      std::string abort_text;
      if (n.kind == NoticeKind::kAbort) {
        abort_text = fmt::format("{} reports: {}", Describe(peer), n.text);
      }
      if (!st.mismatch) {
        const bool reached = st.begun && st.sequence >= n.sequence;
        MarkMismatchLocked(n.communicator, st, n.sequence,
                           fmt::format("{} reports a mismatch", Describe(peer)),
                           std::move(abort_text));
        if (!reached && !st.told_not_reached) {
          // Not there yet: say where this rank is, so the error can name it.
          st.told_not_reached = true;
          CallNotice reply{n.communicator,
                           n.sequence,
                           NoticeKind::kNotReached,
                           st.sequence,
                           st.begun ? st.description : std::string(),
                           {}};
          for (int member : st.members.empty() ? std::vector<int>{peer} : st.members) {
            if (member != self_rank_) replies.emplace_back(member, reply);
          }
        }
      } else if (st.mismatch == n.sequence && !abort_text.empty() && st.abort_text.empty()) {
        st.abort_text = std::move(abort_text);
      }
      if (st.mismatch == n.sequence) {
        auto [it, inserted] = st.notices.try_emplace(peer, n);
        if (!inserted && n.kind == NoticeKind::kDescription) it->second = n;
      }
    }
  }
  SendNotices(replies);
  Wake();
}

void PeerMesh::SendNotices(const std::vector<std::pair<int, CallNotice>>& notices) {
  for (const auto& [peer, notice] : notices) {
    const auto& conns = outgoing_[static_cast<size_t>(peer)];
    if (conns.empty()) continue;
    net::OutgoingMessage m;
    m.header.type = msg::kCallNotice;
    m.header.sender = self_id_;
    m.header.recipient = workers_[static_cast<size_t>(peer)].id;
    m.meta = notice.Encode();
    try {
      transport_.Send(conns.front(), std::move(m));
    } catch (const Error& e) {
      log_.V1("call notice to {} not sent: {}", Describe(peer), e.what());
    }
  }
}

}  // namespace tandem::collective
