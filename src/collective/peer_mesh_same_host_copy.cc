// PeerMesh, the same-host copy (docs/collectives.md "Same-host copy"): on
// connection 0 of each pair the hello and its acknowledgement carry a
// probe (pid, address and value of a cookie); a side that can read the
// peer's cookie with process_vm_readv says so (in kHelloAck, or kCopyStatus
// from the connecting side). To a peer that reads it, a piece larger than
// kCopySendBytes goes as kDataRef (where its bytes are); the receiver
// copies them straight from the sender's memory into the posted
// destination in Wait (peer_mesh_waits.cc), then answers kDataRefDone,
// which ends the send (on_sent). One copy instead of TCP's two, and no
// socket traffic for the bytes.
//
// A reference is answered whatever happens to it: copied, abandoned, never
// copied after a failure, or its link lost, so that no sender keeps its
// memory borrowed for ever.
#include <fmt/format.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <tuple>

#include "collective/peer_mesh.h"
#include "tandem/error.h"

namespace tandem::collective {

CopyProbe PeerMesh::OwnProbe() const {
  if (!options_.same_host_copy || joining_.load()) return {};
  return CopyProbe{static_cast<int32_t>(::getpid()), reinterpret_cast<uintptr_t>(&cookie_), cookie_,
                   mailbox_ ? mailbox_->fd() : -1};
}

bool PeerMesh::CanRead(const CopyProbe& probe, int peer) const {
  if (!options_.same_host_copy || joining_.load() || probe.pid <= 0 || probe.address == 0) {
    return false;
  }
  if (options_.copy_same_address_only && Host(peer) != Host(self_rank_)) return false;
  uint64_t value = 0;
  iovec local{&value, sizeof value};
  iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(probe.address)), sizeof value};
  const ssize_t n = ::process_vm_readv(static_cast<pid_t>(probe.pid), &local, 1, &remote, 1, 0);
  return n == static_cast<ssize_t>(sizeof value) && value == probe.cookie;
}

std::string PeerMesh::CopyFromPeer(int peer, uint64_t address, std::span<std::byte> dest,
                                   FailureKind& kind) const {
  const pid_t pid = static_cast<pid_t>(peer_pids_[static_cast<size_t>(peer)]);
  size_t done = 0;
  while (done < dest.size()) {
    iovec local{dest.data() + done, dest.size() - done};
    iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(address + done)),
                 dest.size() - done};
    const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n <= 0) {
      const int err = n == 0 ? EFAULT : errno;
      kind = err == ESRCH ? FailureKind::kPeerLost : FailureKind::kProtocol;
      return fmt::format(
          "copying {} bytes from the memory of {} (pid {}, same-host copy) failed after {} bytes: "
          "{}{}",
          dest.size(), Describe(peer), pid, done, std::strerror(err),
          err == ESRCH ? "" : " (TANDEM_COLLECTIVE_SAME_HOST_COPY=0 turns the same-host copy off)");
    }
    done += static_cast<size_t>(n);
  }
  return {};
}

int PeerMesh::LinkRank(net::ConnectionId id) const {
  std::lock_guard lock(mu_);
  auto link = links_.find(id);
  if (link == links_.end()) {
    throw ProtocolError("collective data on a connection that sent no hello");
  }
  return link->second.rank;
}

void PeerMesh::OnDataRef(net::ConnectionId id, const net::Message& m) {
  const DataRef ref = DataRef::Decode(m.meta);
  AcceptDataRef(LinkRank(id), id, ref);
}

void PeerMesh::AcceptDataRef(int peer, net::ConnectionId link, const DataRef& ref) {
  bool release = false;
  {
    std::lock_guard lock(mu_);
    if (peer_pids_[static_cast<size_t>(peer)] == 0) {
      throw ProtocolError(fmt::format(
          "{} sent a piece by reference, but this process cannot read its memory", Describe(peer)));
    }
    if (failure_ || !AdmitLocked(peer, ref.key)) {
      // Never copied after a failure or for a mismatched operation: the
      // sender may let go at once.
      release = true;
    } else {
      auto [it, inserted] = slots_.try_emplace(SlotKey{peer, ref.key});
      Slot& s = it->second;
      if (!inserted && s.state != Slot::State::kPosted) {
        throw ProtocolError(
            fmt::format("{} sent the piece (communicator {}, operation {}, tag {:#x}) twice",
                        Describe(peer), ref.key.communicator, ref.key.sequence, ref.key.tag));
      }
      s.state = Slot::State::kRef;
      s.ref_address = ref.address;
      s.ref_length = ref.length;
      s.ref_link = link;
    }
  }
  if (release) {
    SendRefDone(peer, link, ref.key);
    return;
  }
  Wake();
}

void PeerMesh::OnDataRefDone(net::ConnectionId id, const net::Message& m) {
  const MessageKey key = MessageKey::Decode(m.meta);
  AcceptDataRefDone(LinkRank(id), key);
}

void PeerMesh::AcceptDataRefDone(int peer, const MessageKey& key) {
  std::function<void(std::exception_ptr)> done;
  {
    std::lock_guard lock(mu_);
    auto it = refs_out_.find(SlotKey{peer, key});
    if (it == refs_out_.end()) return;  // failed already, with a lost link
    done = std::move(it->second);
    refs_out_.erase(it);
  }
  done(nullptr);
}

void PeerMesh::SendRefDone(int peer, net::ConnectionId id, const MessageKey& key) {
  if (WriteMailbox(peer, msg::kDataRefDone, key, {})) return;
  net::OutgoingMessage m;
  m.header.type = msg::kDataRefDone;
  m.header.sender = self_id_;
  m.meta = key.Encode();
  transport_.Send(id, std::move(m));
}

std::vector<std::function<void(std::exception_ptr)>> PeerMesh::TakeRefsLocked(int peer) {
  std::vector<std::function<void(std::exception_ptr)>> out;
  for (auto it = refs_out_.begin(); it != refs_out_.end();) {
    if (it->first.peer == peer) {
      out.push_back(std::move(it->second));
      it = refs_out_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void PeerMesh::ReleaseUncopiedRefs() {
  {
    std::lock_guard lock(mu_);
    if (!failure_) return;
  }
  // References still in the mailbox are answered as they are delivered.
  DrainMailbox();
  std::vector<std::tuple<int, net::ConnectionId, MessageKey>> release;
  {
    std::lock_guard lock(mu_);
    for (auto it = slots_.begin(); it != slots_.end();) {
      if (it->second.state == Slot::State::kRef) {
        release.emplace_back(it->first.peer, it->second.ref_link, it->first.key);
        it = slots_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const auto& [peer, link, key] : release) SendRefDone(peer, link, key);
}

std::pair<int, int> PeerMesh::SameHostPeers() const {
  std::lock_guard lock(mu_);
  int out = 0, in = 0;
  for (char c : peer_reads_me_) out += c ? 1 : 0;
  for (int32_t pid : peer_pids_) in += pid != 0 ? 1 : 0;
  return {out, in};
}

}  // namespace tandem::collective
