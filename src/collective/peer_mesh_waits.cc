// PeerMesh, waiting for pieces (docs/collectives.md "Waiting"): a wait
// drains the mailbox, looks at its posted receives, and sleeps on the
// doorbell (a futex) that the mailbox's writers, the transport's callbacks
// and failures ring; on mailbox peers it first polls for up to the spin
// budget, and over TCP while such waits have lately been short. The
// waiting thread also copies a piece sent by reference straight from the
// sender's memory into the posted destination, then answers it.
// A wait whose pieces all come over TCP reads the connections on its own
// thread (net::Transport::ReadWhileWaiting) rather than sleeping until the
// transport's thread has read them: one wake-up instead of two.
// A wait that has lasted kCrossWait looks for a crossed order of
// operations (peer_mesh_call_checks.cc) every kCrossPoll, and one that
// lasts a report interval logs what it waits for.
#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "collective/peer_mesh.h"
#include "tandem/error.h"

namespace tandem::collective {

namespace {
// How often a long wait looks for a crossed order of operations.
constexpr std::chrono::milliseconds kCrossPoll{100};
}  // namespace

PeerMesh::Progress PeerMesh::TryCompleteLocked(std::unique_lock<std::mutex>& lock,
                                               const SlotKey& sk) {
  auto it = slots_.find(sk);
  if (it != slots_.end() && it->second.state == Slot::State::kRef && it->second.posted &&
      !failure_) {
    // Same-host copy: this thread copies the piece out of the peer.
    Slot& s = it->second;
    const std::span<std::byte> dest = s.dest;
    const uint64_t address = s.ref_address;
    const uint64_t length = s.ref_length;
    const net::ConnectionId link = s.ref_link;
    s.state = Slot::State::kFilling;
    lock.unlock();
    std::string error;
    FailureKind kind = FailureKind::kProtocol;
    bool copy_failed = false;
    if (length != dest.size()) {
      error = fmt::format(
          "{} sent {} bytes for a piece of {} bytes (communicator {}, operation {}, tag {:#x})",
          Describe(sk.peer), length, dest.size(), sk.key.communicator, sk.key.sequence, sk.key.tag);
    } else {
      error = CopyFromPeer(sk.peer, address, dest, kind);
      copy_failed = !error.empty();
    }
    SendRefDone(sk.peer, link, sk.key);
    if (copy_failed && elastic_) {
      // A worker that died cannot be read: in an elastic job its loss is
      // the scheduler's to judge, as a lost link's (peer_mesh_failure.cc).
      // The piece never completes; the verdict retires its communicator,
      // or fails the mesh with this text.
      log_.V1("{}; waiting for the scheduler's verdict (elastic job)", error);
      lock.lock();
      if (!departed_[static_cast<size_t>(sk.peer)]) {
        lost_links_.emplace(sk.peer, std::pair{error, Clock::now()});
      }
      return Progress::kPending;
    }
    if (copy_failed) {
      log_.Error("{}", error);
      Fail(kind, error);
    }
    lock.lock();
    it = slots_.find(sk);
    if (it == slots_.end()) return Progress::kFailed;
    if (failure_) {
      // The peer may have let go of its memory meanwhile: the bytes
      // cannot be trusted.
      slots_.erase(it);
      return Progress::kFailed;
    }
    it->second.state = Slot::State::kDone;
    it->second.error = std::move(error);
  }
  if (it != slots_.end() && it->second.state == Slot::State::kDone) {
    std::string error = std::move(it->second.error);
    slots_.erase(it);
    if (!error.empty()) throw ProtocolError(error);
    return Progress::kDone;
  }
  return Progress::kPending;
}

PeerMesh::WaitResult PeerMesh::Wait(int peer, const MessageKey& key,
                                    std::chrono::steady_clock::time_point deadline) {
  const SlotKey one[] = {SlotKey{peer, key}};
  return WaitAny(one, deadline).first;
}

std::pair<PeerMesh::WaitResult, size_t> PeerMesh::WaitAny(
    std::span<const SlotKey> pieces, std::chrono::steady_clock::time_point deadline) {
  std::chrono::steady_clock::time_point spin_until{};  // set by the first poll
  bool last_look = false;
  std::chrono::microseconds spin{0};
  // Pieces that all come over TCP: this thread may read them itself.
  bool read_here = options_.read_while_waiting && !pieces.empty();
  for (const SlotKey& piece : pieces) {
    if (mailbox_ && mailbox_to_[static_cast<size_t>(piece.peer)]) read_here = false;
  }
  // Unless set, polling over TCP follows how long such waits lately took.
  bool tcp_adaptive = false;
  if (options_.spin) {
    spin = *options_.spin;
  } else if (read_here) {
    tcp_adaptive = true;
    if (tcp_wait_average_ns_.load(std::memory_order_relaxed) <
        std::chrono::nanoseconds(kTcpSpin).count()) {
      spin = kTcpSpin;
    }
  } else if (mailbox_) {
    spin = kMailboxSpin;
    for (const SlotKey& piece : pieces) {
      if (!mailbox_to_[static_cast<size_t>(piece.peer)]) spin = std::chrono::microseconds(0);
    }
  }
  const auto started = Clock::now();
  // Whether this thread read the connections (a piece there at the first
  // look says nothing about how long the peers take to answer).
  bool read_myself = false;
  auto done = [&](size_t i) -> std::pair<WaitResult, size_t> {
    if (tcp_adaptive && read_myself) {
      const int64_t took = std::chrono::nanoseconds(Clock::now() - started).count();
      const int64_t average = tcp_wait_average_ns_.load(std::memory_order_relaxed);
      tcp_wait_average_ns_.store(average + (took - average) / kTcpWaitWeight,
                                 std::memory_order_relaxed);
    }
    return {WaitResult::kDone, i};
  };
  const base::SteadyClock steady;
  base::WaitReport report(steady, options_.wait_report_interval);
  std::vector<std::pair<int, CallNotice>> crossing_notices;
  const uint32_t communicator = pieces.empty() ? 0 : pieces.front().key.communicator;
  const uint64_t sequence = pieces.empty() ? 0 : pieces.front().key.sequence;
  for (;;) {
    base::Doorbell& bell = Bell();
    const uint32_t seen = bell.Value();
    DrainMailbox();
    bool look_for_crossing = false;
    {
      std::unique_lock lock(mu_);
      auto st = calls_.find(communicator);
      if (!pieces.empty() && st != calls_.end() && st->second.mismatch == sequence) {
        return {WaitResult::kMismatch, 0};
      }
      for (size_t i = 0; i < pieces.size(); ++i) {
        switch (TryCompleteLocked(lock, pieces[i])) {
          case Progress::kDone:
            return done(i);
          case Progress::kFailed:
            return {WaitResult::kFailed, 0};
          case Progress::kPending:
            break;
        }
      }
      if (!lost_links_.empty()) CheckVerdictsLocked();
      if (failure_ || (!pieces.empty() && RetiredLocked(communicator))) {
        return {WaitResult::kFailed, 0};
      }
      if (read_here) {
        // A large piece is read best by the transport's thread, into its
        // posted destination, while this thread reduces the one before: the
        // reads overlap the arithmetic (16 MiB allreduce 27 -> 35 ms when
        // the waiting thread read everything itself).
        for (const SlotKey& piece : pieces) {
          auto it = slots_.find(piece);
          if (it != slots_.end() && it->second.dest.size() > kReadHereMaxBytes) read_here = false;
        }
        // Polling is for pieces this thread reads: the transport's thread
        // needs the core for the others.
        if (!read_here && tcp_adaptive) spin = std::chrono::microseconds(0);
      }
      look_for_crossing = !pieces.empty() && Clock::now() - started >= kCrossWait;
      if (look_for_crossing) {
        const bool crossed = CrossedOrderLocked(pieces, crossing_notices).has_value();
        lock.unlock();
        SendNotices(crossing_notices);  // the probes, or the aborts
        crossing_notices.clear();
        if (crossed) return {WaitResult::kMismatch, 0};
      }
    }
    if (last_look) return {WaitResult::kTimedOut, 0};
    if (!pieces.empty() && report.TakeDue()) {
      // No wait goes a report interval without a line saying what for.
      std::string from;
      for (const SlotKey& piece : pieces) from += (from.empty() ? "" : ", ") + Describe(piece.peer);
      log_.Warn(
          "collective operation {} of communicator {}: still waiting for {} {} "
          "(TANDEM_COLLECTIVE_TIMEOUT gives up in {:.0f} s)",
          sequence, communicator, from, report.Lasted(),
          std::chrono::duration<double>(deadline - Clock::now()).count());
    }
    // Past the deadline: one last look, since a piece may have completed
    // right at it. From kCrossWait on, wake every 100 ms to look for a
    // crossed order (nothing rings for it).
    const auto until =
        pieces.empty()
            ? deadline
            : std::min(deadline, std::max(started + kCrossWait, Clock::now() + kCrossPoll));
    // Poll before sleeping: a piece due within the spin budget is seen
    // without the wake-up of a sleeping thread (docs/collectives.md,
    // "Waiting").
    const auto now = std::chrono::steady_clock::now();
    if (spin.count() > 0 && spin_until == std::chrono::steady_clock::time_point{}) {
      spin_until = std::min(deadline, now + spin);
    }
    const std::chrono::microseconds poll =
        now < spin_until ? std::chrono::duration_cast<std::chrono::microseconds>(spin_until - now)
                         : std::chrono::microseconds(0);
    if (read_here && transport_.ReadWhileWaiting(
                         until, [&] { return bell.Value() != seen; }, kReadSlice, poll)) {
      // The piece's bytes woke this thread, which read and delivered them
      // (and whatever else the connections brought) itself.
      read_myself = true;
      if (bell.Value() == seen && until == deadline && Clock::now() >= deadline) last_look = true;
      continue;
    }
    // Polling over TCP is for a thread that reads the connections itself;
    // one that sleeps until another thread delivers (another wait drives
    // the connections, or an in-process transport) leaves it the core.
    if (poll.count() > 0 && !tcp_adaptive) {
      // Yielding keeps the transport's thread running on a machine with
      // fewer cores than threads.
      while (bell.Value() == seen && std::chrono::steady_clock::now() < spin_until) {
        std::this_thread::yield();
      }
      continue;
    }
    if (!bell.Sleep(seen, until) && until == deadline) last_look = true;
  }
}

bool PeerMesh::WaitUntil(const std::function<bool()>& ready,
                         std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    base::Doorbell& bell = Bell();
    const uint32_t seen = bell.Value();
    DrainMailbox();
    if (ready()) return true;
    if (!bell.Sleep(seen, deadline)) {
      DrainMailbox();
      return ready();
    }
  }
}

}  // namespace tandem::collective
