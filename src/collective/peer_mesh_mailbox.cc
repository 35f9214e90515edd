// PeerMesh, the mailbox (docs/collectives.md "Mailbox"): where the
// same-host copy works, each worker also shares a region of rings
// (same_host_mailbox.h) and small pieces, data refs and their answers go
// through it: the sending thread writes them and the waiting thread drains
// them, so neither side's transport thread is woken. A full ring sends the
// record over TCP instead; a malformed one fails the mesh. One thread at a
// time drains (`draining_`).
#include <fmt/format.h>

#include "collective/peer_mesh.h"
#include "tandem/error.h"

namespace tandem::collective {

void PeerMesh::Ring(int peer) {
  if (MailboxLink* link = mailbox_to_[static_cast<size_t>(peer)].get()) link->Ring();
}

bool PeerMesh::WriteMailbox(int peer, uint16_t type, const MessageKey& key,
                            std::span<const std::byte> payload, uint64_t address, uint64_t length,
                            bool ring) {
  MailboxLink* link = mailbox_to_[static_cast<size_t>(peer)].get();
  if (link == nullptr) return false;
  try {
    if (link->TryWrite(type, key, payload, address, length, ring)) {
      if (traffic_ != nullptr) {
        net::Header h;
        h.type = type;
        h.recipient = workers_[static_cast<size_t>(peer)].id;
        traffic_->Sent(h, MailboxRecordSize(payload.size()));
      }
      return true;
    }
    mailbox_full_.fetch_add(1, std::memory_order_relaxed);
    return false;
  } catch (const Error& e) {
    const std::string text = fmt::format("the mailbox of {}: {}", Describe(peer), e.what());
    log_.Error("{}", text);
    Fail(FailureKind::kProtocol, text);
    return false;
  }
}

void PeerMesh::OpenMailboxLocked(int peer, const CopyProbe& probe) {
  if (!mailbox_ || probe.mailbox < 0 || mailbox_to_[static_cast<size_t>(peer)]) return;
  try {
    mailbox_to_[static_cast<size_t>(peer)] =
        std::make_unique<MailboxLink>(probe.pid, probe.mailbox, probe.cookie, self_rank_);
  } catch (const Error& e) {
    log_.Warn("small pieces to {} go over TCP: {}", Describe(peer), e.what());
  }
}

void PeerMesh::DrainMailbox() {
  MailboxRegion* region = region_.load(std::memory_order_acquire);
  if (region == nullptr || draining_.test_and_set(std::memory_order_acquire)) return;
  size_t delivered = 0;
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == self_rank_ || ring_broken_[static_cast<size_t>(peer)]) continue;
    try {
      delivered += region->Drain(peer, [&](const MailboxRecord& r) { DeliverRecord(peer, r); });
    } catch (const Error& e) {
      // The ring stays as it is: a failed mesh reads no more pieces.
      const std::string text = fmt::format("{}: {}", Describe(peer), e.what());
      log_.Error("{}", text);
      ring_broken_[static_cast<size_t>(peer)] = 1;
      draining_.clear(std::memory_order_release);
      Fail(FailureKind::kProtocol, text);
      return;
    }
  }
  draining_.clear(std::memory_order_release);
  if (delivered > 0) Wake();
}

void PeerMesh::DeliverRecord(int peer, const MailboxRecord& r) {
  if (traffic_ != nullptr) {
    net::Header h;
    h.type = r.type;
    h.sender = workers_[static_cast<size_t>(peer)].id;
    traffic_->Received(h, MailboxRecordSize(r.payload.size()));
  }
  if (r.type == msg::kData) {
    DeliverPiece(peer, r.key, r.payload);
  } else if (r.type == msg::kDataRef) {
    AcceptDataRef(peer, outgoing_[static_cast<size_t>(peer)].front(),
                  DataRef{r.key, r.address, r.length});
  } else {
    AcceptDataRefDone(peer, r.key);
  }
}

int PeerMesh::MailboxPeers() const {
  std::lock_guard lock(mu_);
  int n = 0;
  for (const auto& link : mailbox_to_) n += link ? 1 : 0;
  return n;
}

}  // namespace tandem::collective
