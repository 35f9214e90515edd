// PeerMesh, pieces: a kData message carries a MessageKey (communicator,
// sequence, tag). An operation posts a receive for (peer, key) with its
// destination; when the header of the matching message arrives the
// transport reads the payload straight into it (PayloadDestination). A
// message that arrives before its receive is posted is kept (the transport
// allocated it) and copied when the receive is posted. Every arriving piece
// passes the call checks first (AdmitLocked, peer_mesh_call_checks.cc).
//
// Sending: a piece up to kCopySendBytes goes through the peer's mailbox
// (peer_mesh_mailbox.cc) or is copied and written from the calling thread;
// a larger one goes by reference to a peer that reads this process's
// memory (peer_mesh_same_host_copy.cc), else zero-copy from the caller's
// memory by the transport's thread.
#include <fmt/format.h>

#include <cstring>

#include "collective/peer_mesh.h"
#include "tandem/error.h"

namespace tandem::collective {

bool PeerMesh::Send(int peer, const MessageKey& key, std::span<const std::byte> bytes,
                    std::function<void(std::exception_ptr)> on_sent, bool ring_later) {
  const auto& conns = outgoing_[static_cast<size_t>(peer)];
  // Spread an operation's pieces over the pair's connections; all pieces
  // of one (sequence, tag) use the same one.
  net::ConnectionId id = conns[(key.tag + key.sequence) % conns.size()];
  net::OutgoingMessage m;
  m.header.type = msg::kData;
  m.header.sender = self_id_;
  m.header.recipient = workers_[static_cast<size_t>(peer)].id;
  m.meta = key.Encode();
  if (bytes.size() <= kCopySendBytes) {
    if (WriteMailbox(peer, msg::kData, key, bytes, 0, 0, !ring_later)) {
      on_sent(nullptr);
      return ring_later;
    }
    // Small: copy, and send without on_sent, which the transport writes at
    // once from this thread instead of waking its own (docs/transport.md);
    // the copy costs less than the thread hop. The caller's span is free now.
    m.owned_storage.assign(bytes.begin(), bytes.end());
    if (!bytes.empty()) m.payload.emplace_back(m.owned_storage.data(), m.owned_storage.size());
    transport_.Send(id, std::move(m));
    on_sent(nullptr);
    return false;
  }
  {
    std::unique_lock lock(mu_);
    if (elastic_ && (departed_[static_cast<size_t>(peer)] || lost_links_.count(peer) ||
                     OpenLinksLocked(peer) == 0)) {
      // Nobody would answer a piece sent by reference (its mailbox may
      // still take the record): the send fails now, as one on the lost
      // link does.
      lock.unlock();
      on_sent(std::make_exception_ptr(PeerLost(
          fmt::format("{} is lost or left the job: piece (communicator {}, operation {}) not sent",
                      Describe(peer), key.communicator, key.sequence))));
      return false;
    }
    if (peer_reads_me_[static_cast<size_t>(peer)] && !failure_) {
      // Same-host copy: the peer copies the bytes itself; on_sent runs on
      // its kDataRefDone (or when the link is lost).
      const SlotKey sk{peer, key};
      if (refs_out_.count(sk)) {
        lock.unlock();
        throw InvalidArgument(fmt::format(
            "collective send to rank {} (communicator {}, operation {}, tag {:#x}) is already "
            "in flight",
            peer, key.communicator, key.sequence, key.tag));
      }
      refs_out_.emplace(sk, std::move(on_sent));
      lock.unlock();
      if (WriteMailbox(peer, msg::kDataRef, key, {}, reinterpret_cast<uintptr_t>(bytes.data()),
                       bytes.size(), !ring_later)) {
        return ring_later;
      }
      m.header.type = msg::kDataRef;
      m.meta = DataRef{key, reinterpret_cast<uintptr_t>(bytes.data()), bytes.size()}.Encode();
      try {
        transport_.Send(id, std::move(m));
      } catch (...) {
        std::function<void(std::exception_ptr)> f;
        {
          std::lock_guard relock(mu_);
          auto it = refs_out_.find(sk);
          if (it == refs_out_.end()) return false;  // already failed with the link
          f = std::move(it->second);
          refs_out_.erase(it);
        }
        f(std::current_exception());
      }
      return false;
    }
  }
  m.payload.push_back(bytes);
  m.on_sent = std::move(on_sent);
  transport_.Send(id, std::move(m));
  return false;
}

void PeerMesh::Post(int peer, const MessageKey& key, std::span<std::byte> dest) {
  std::unique_ptr<std::byte[]> early;
  size_t early_size = 0;
  {
    std::lock_guard lock(mu_);
    auto [it, inserted] = slots_.try_emplace(SlotKey{peer, key});
    Slot& s = it->second;
    if (inserted) {
      s.dest = dest;
      s.posted = true;
      return;
    }
    if (s.state == Slot::State::kRef && !s.posted) {
      // Sent by reference before we posted: Wait copies it.
      s.dest = dest;
      s.posted = true;
      return;
    }
    if (s.state != Slot::State::kArrived) {
      throw InvalidArgument(fmt::format(
          "collective receive from rank {} (communicator {}, operation {}, tag {:#x}) is "
          "already posted",
          peer, key.communicator, key.sequence, key.tag));
    }
    // The peer was ahead of us: copy what it sent, outside the lock.
    early = std::move(s.arrived);
    early_size = s.arrived_size;
    s.state = Slot::State::kFilling;
    s.dest = dest;
    s.posted = true;
  }
  std::string error;
  if (early_size != dest.size()) {
    error = fmt::format("{} sent {} bytes for a piece of {} bytes", Describe(peer), early_size,
                        dest.size());
  } else if (early_size > 0) {
    std::memcpy(dest.data(), early.get(), early_size);
  }
  {
    std::lock_guard lock(mu_);
    Slot& s = slots_[SlotKey{peer, key}];
    s.state = Slot::State::kDone;
    s.error = std::move(error);
  }
  Wake();
}

std::span<std::byte> PeerMesh::PayloadDestination(net::ConnectionId id, const net::Header& h,
                                                  const std::string& meta) {
  if (h.type != msg::kData || h.payload_length == 0) return {};
  MessageKey key;
  try {
    key = MessageKey::Decode(meta);
  } catch (const Error&) {
    return {};  // OnMessage reports it
  }
  std::lock_guard lock(mu_);
  auto link = links_.find(id);
  if (link == links_.end() || !AdmitLocked(link->second.rank, key)) return {};
  auto it = slots_.find(SlotKey{link->second.rank, key});
  if (it == slots_.end() || it->second.state != Slot::State::kPosted ||
      it->second.dest.size() != h.payload_length) {
    return {};
  }
  it->second.state = Slot::State::kFilling;
  return it->second.dest;
}

void PeerMesh::DeliverPiece(int peer, const MessageKey& key, std::span<const std::byte> bytes,
                            std::unique_ptr<std::byte[]> owned) {
  std::span<std::byte> dest;
  {
    std::lock_guard lock(mu_);
    if (!AdmitLocked(peer, key)) return;
    auto [it, inserted] = slots_.try_emplace(SlotKey{peer, key});
    Slot& s = it->second;
    if (inserted) {
      // Ahead of its receive: kept until Post.
      s.state = Slot::State::kArrived;
      s.arrived_size = bytes.size();
      if (owned) {
        s.arrived = std::move(owned);
      } else if (!bytes.empty()) {
        s.arrived = std::make_unique<std::byte[]>(bytes.size());
        std::memcpy(s.arrived.get(), bytes.data(), bytes.size());
      }
      return;
    }
    if (s.state != Slot::State::kPosted) {
      throw ProtocolError(
          fmt::format("{} sent the piece (communicator {}, operation {}, tag {:#x}) twice",
                      Describe(peer), key.communicator, key.sequence, key.tag));
    }
    if (bytes.size() != s.dest.size()) {
      s.error = fmt::format(
          "{} sent {} bytes for a piece of {} bytes (communicator {}, operation {}, tag {:#x})",
          Describe(peer), bytes.size(), s.dest.size(), key.communicator, key.sequence, key.tag);
      s.state = Slot::State::kDone;
      return;
    }
    if (bytes.empty()) {
      s.state = Slot::State::kDone;
      return;
    }
    s.state = Slot::State::kFilling;
    dest = s.dest;
  }
  std::memcpy(dest.data(), bytes.data(), bytes.size());
  std::lock_guard lock(mu_);
  auto it = slots_.find(SlotKey{peer, key});
  if (it != slots_.end()) it->second.state = Slot::State::kDone;
}

bool PeerMesh::Complete(int peer, const MessageKey& key) const {
  std::lock_guard lock(mu_);
  auto it = slots_.find(SlotKey{peer, key});
  return it != slots_.end() && it->second.state == Slot::State::kDone;
}

bool PeerMesh::Ready(int peer, const MessageKey& key) const {
  std::lock_guard lock(mu_);
  auto it = slots_.find(SlotKey{peer, key});
  if (it == slots_.end()) return false;
  const Slot::State st = it->second.state;
  return st == Slot::State::kDone || st == Slot::State::kArrived || st == Slot::State::kRef;
}

void PeerMesh::Abandon(int peer, const MessageKey& key) {
  std::unique_lock lock(mu_);
  const SlotKey sk{peer, key};
  // A piece being filled finishes as soon as its bytes arrived; a peer that
  // stalls in the middle of one gets its connections closed, which ends it.
  auto close_at = Clock::now() + std::chrono::seconds(2);
  bool closed = false;
  for (;;) {
    auto it = slots_.find(sk);
    if (it == slots_.end()) return;
    if (it->second.state == Slot::State::kRef) {
      // Not copied: the sender may let go of its memory.
      const net::ConnectionId link = it->second.ref_link;
      slots_.erase(it);
      lock.unlock();
      SendRefDone(peer, link, key);
      return;
    }
    if (it->second.state != Slot::State::kFilling || OpenLinksLocked(peer) == 0) {
      slots_.erase(it);
      return;
    }
    if (cv_.wait_until(lock, close_at) == std::cv_status::timeout) {
      if (closed) {
        log_.Error("a receive from {} was still being filled 30 s after its connections closed",
                   Describe(peer));
        slots_.erase(sk);
        return;
      }
      std::vector<net::ConnectionId> ids;
      for (const auto& [id, link] : links_) {
        if (link.rank == peer && link.open) ids.push_back(id);
      }
      lock.unlock();
      for (net::ConnectionId id : ids) transport_.Close(id);
      lock.lock();
      closed = true;
      close_at = Clock::now() + std::chrono::seconds(30);
    }
  }
}

int PeerMesh::OpenLinksLocked(int peer) const {
  int n = 0;
  for (const auto& [id, link] : links_) n += (link.rank == peer && link.open) ? 1 : 0;
  return n;
}

void PeerMesh::OnData(net::ConnectionId id, net::Message&& m) {
  MessageKey key = MessageKey::Decode(m.meta);
  int peer = -1;
  bool placed = false;
  {
    std::lock_guard lock(mu_);
    auto link = links_.find(id);
    if (link == links_.end()) {
      throw ProtocolError("collective data on a connection that sent no hello");
    }
    peer = link->second.rank;
    // The transport read the payload straight into the posted receive.
    auto it = slots_.find(SlotKey{peer, key});
    if (it != slots_.end() && it->second.state == Slot::State::kFilling &&
        m.payload.in_posted_buffer()) {
      it->second.state = Slot::State::kDone;
      placed = true;
    }
  }
  if (!placed) DeliverPiece(peer, key, m.payload.bytes, std::move(m.payload.owned));
  Wake();
}

}  // namespace tandem::collective
