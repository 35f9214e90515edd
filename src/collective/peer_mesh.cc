#include "collective/peer_mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>
#include <tuple>

#include "tandem/error.h"

namespace tandem::collective {

using Clock = std::chrono::steady_clock;

namespace {
// How often a long wait looks for a crossed order of operations.
constexpr std::chrono::milliseconds kCrossPoll{100};
}  // namespace

void MeshFailure::Throw(const std::string& prefix) const {
  switch (kind) {
    case FailureKind::kPeerLost:
      throw PeerLost(prefix + text);
    case FailureKind::kTimeout:
      throw Timeout(prefix + text);
    case FailureKind::kProtocol:
      throw ProtocolError(prefix + text);
    case FailureKind::kMismatch:
      throw CallMismatch(prefix + text);
    case FailureKind::kIo:
      throw IoError(prefix + text);
    case FailureKind::kInvalidArgument:
      throw InvalidArgument(prefix + text);
    case FailureKind::kConfig:
      throw ConfigError(prefix + text);
    case FailureKind::kOther:
      break;
  }
  throw Error(prefix + text);
}

FailureKind FailureKindOf(const std::exception_ptr& error) {
  if (!error) return FailureKind::kPeerLost;
  try {
    std::rethrow_exception(error);
  } catch (const PeerLost&) {
    return FailureKind::kPeerLost;
  } catch (const Timeout&) {
    return FailureKind::kTimeout;
  } catch (const ProtocolError&) {
    return FailureKind::kProtocol;
  } catch (const CallMismatch&) {
    return FailureKind::kMismatch;
  } catch (const IoError&) {
    return FailureKind::kIo;
  } catch (const InvalidArgument&) {
    return FailureKind::kInvalidArgument;
  } catch (const ConfigError&) {
    return FailureKind::kConfig;
  } catch (...) {
    return FailureKind::kOther;
  }
}

namespace {

uint64_t RandomCookie() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd() ^ 0x74616e64656d0000ULL;  // never 0
}

}  // namespace

PeerMesh::PeerMesh(Options options, net::Transport& transport, base::Logger& log,
                   net::TrafficMeter* traffic)
    : options_(options),
      transport_(transport),
      log_(log),
      traffic_(traffic),
      cookie_(RandomCookie()) {
  if (options_.connections_per_peer < 1) {
    throw InvalidArgument(fmt::format("connections per peer must be at least 1, got {}",
                                      options_.connections_per_peer));
  }
}

PeerMesh::~PeerMesh() = default;

std::string PeerMesh::Describe(int rank) const {
  if (rank < 0 || rank >= size()) return fmt::format("worker rank {}", rank);
  const NodeInfo& n = workers_[static_cast<size_t>(rank)];
  return fmt::format("worker rank {} ({}:{})", rank, n.host, n.port);
}

void PeerMesh::Connect(const cluster::NodeTable& table, int self_rank, int self_id) {
  std::vector<NodeInfo> workers(static_cast<size_t>(table.num_workers));
  for (const NodeInfo& n : table.nodes) {
    if (n.role == Role::kWorker) workers[static_cast<size_t>(n.rank)] = n;
  }
  const int k_count = options_.connections_per_peer;
  {
    std::lock_guard lock(mu_);
    workers_ = std::move(workers);
    self_rank_ = self_rank;
    self_id_ = self_id;
    outgoing_.assign(workers_.size(), {});
    peer_reads_me_.assign(workers_.size(), 0);
    peer_pids_.assign(workers_.size(), 0);
    peer_offers_.assign(workers_.size(), 0);
    status_heard_.assign(workers_.size(), 0);
    mailbox_to_.resize(workers_.size());
    ring_broken_.assign(workers_.size(), 0);
    if (options_.same_host_copy && options_.mailbox && workers_.size() > 1 &&
        workers_.size() <= kMaxMailboxRings) {
      try {
        mailbox_ = std::make_unique<MailboxRegion>(static_cast<int>(workers_.size()),
                                                   MailboxRegion::kDefaultRingBytes, cookie_);
        doorbell_.store(&mailbox_->doorbell(), std::memory_order_release);
        // Last: a drain on another thread (a failure's) sees the region
        // only with the tables above.
        region_.store(mailbox_.get(), std::memory_order_release);
      } catch (const Error& e) {
        log_.Warn("collective mailbox not created, small pieces go over TCP: {}", e.what());
      }
    }
  }
  std::vector<std::pair<net::ConnectionId, bool>> to_ack;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, hello] : early_hellos_) {
      if (auto reads = AcceptHelloLocked(id, hello)) to_ack.emplace_back(id, *reads);
    }
    early_hellos_.clear();
  }
  for (const auto& [id, reads] : to_ack) SendAck(id, reads);
  const auto deadline = Clock::now() + options_.connect_timeout;
  // Lower ranks: we connect. Higher ranks connect to us.
  for (int peer = 0; peer < self_rank; ++peer) {
    const NodeInfo& n = workers_[static_cast<size_t>(peer)];
    for (int k = 0; k < k_count; ++k) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      net::ConnectionId id =
          transport_.Connect({n.host, n.port}, std::max(left, std::chrono::milliseconds(1)));
      {
        std::lock_guard lock(mu_);
        links_[id] = Link{peer, true, false};
        outgoing_[static_cast<size_t>(peer)].push_back(id);
      }
      net::OutgoingMessage m;
      m.header.type = msg::kHello;
      m.header.sender = self_id_;
      m.header.recipient = n.id;
      Hello hello{self_rank, static_cast<uint32_t>(k), static_cast<uint32_t>(k_count), {}};
      if (k == 0) hello.probe = OwnProbe();
      m.meta = hello.Encode();
      transport_.Send(id, std::move(m));
    }
  }
  std::unique_lock lock(mu_);
  auto missing = [&] {
    std::vector<int> out;
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == self_rank) continue;
      const auto& conns = outgoing_[static_cast<size_t>(peer)];
      bool complete = static_cast<int>(conns.size()) == k_count;
      if (peer < self_rank) {
        for (net::ConnectionId id : conns) complete = complete && links_[id].acked;
      } else {
        // Its verdict on our probe, so that both ends know the path first.
        complete = complete && status_heard_[static_cast<size_t>(peer)];
      }
      if (!complete) out.push_back(peer);
    }
    return out;
  };
  const base::SteadyClock steady;
  base::WaitReport report(steady, options_.wait_report_interval);
  while (!failure_ && !missing().empty()) {
    const auto wake = std::min(deadline, Clock::now() + report.NextIn());
    if (cv_.wait_until(lock, wake) == std::cv_status::timeout && Clock::now() >= deadline) break;
    if (report.TakeDue()) {
      std::string names;
      for (int r : missing()) names += (names.empty() ? "" : ", ") + Describe(r);
      if (!names.empty()) {
        log_.Warn(
            "forming the collective mesh: worker rank {} still waits for {} {} (gives up "
            "after {} s, TANDEM_CONNECT_TIMEOUT)",
            self_rank, names, report.Lasted(),
            std::chrono::duration_cast<std::chrono::seconds>(options_.connect_timeout).count());
      }
    }
  }
  if (failure_) failure_->Throw("forming the collective mesh failed: ");
  auto absent = missing();
  if (!absent.empty()) {
    std::string names;
    for (int r : absent) names += (names.empty() ? "" : ", ") + Describe(r);
    throw Timeout(
        fmt::format("forming the collective mesh: worker rank {} did not hear from {} within {} ms "
                    "(TANDEM_CONNECT_TIMEOUT)",
                    self_rank, names, options_.connect_timeout.count()));
  }
  int copy_peers = 0, mailbox_peers = 0;
  for (int peer = 0; peer < size(); ++peer) {
    const auto p = static_cast<size_t>(peer);
    copy_peers += (peer_reads_me_[p] && peer_pids_[p] != 0) ? 1 : 0;
    mailbox_peers += mailbox_to_[p] ? 1 : 0;
    // A peer that reads this process's memory may write its ring here:
    // back it with memory before the first operation pays the faults.
    if (mailbox_ && peer_reads_me_[p]) mailbox_->Prefault(peer);
  }
  log_.V1(
      "collective mesh formed: {} workers, {} connection(s) per pair, same-host copy with {} "
      "of {} peers{}, mailbox with {}{}",
      size(), k_count, copy_peers, size() - 1,
      options_.same_host_copy ? "" : " (TANDEM_COLLECTIVE_SAME_HOST_COPY=0)", mailbox_peers,
      options_.mailbox ? "" : " (TANDEM_COLLECTIVE_MAILBOX=0)");
}

bool PeerMesh::OffersCopy(int rank) const {
  if (rank == self_rank_) return options_.same_host_copy;
  std::lock_guard lock(mu_);
  return peer_offers_.at(static_cast<size_t>(rank)) != 0;
}

int PeerMesh::MailboxPeers() const {
  std::lock_guard lock(mu_);
  int n = 0;
  for (const auto& link : mailbox_to_) n += link ? 1 : 0;
  return n;
}

std::pair<int, int> PeerMesh::SameHostPeers() const {
  std::lock_guard lock(mu_);
  int out = 0, in = 0;
  for (char c : peer_reads_me_) out += c ? 1 : 0;
  for (int32_t pid : peer_pids_) in += pid != 0 ? 1 : 0;
  return {out, in};
}

CopyProbe PeerMesh::OwnProbe() const {
  if (!options_.same_host_copy) return {};
  return CopyProbe{static_cast<int32_t>(::getpid()), reinterpret_cast<uintptr_t>(&cookie_), cookie_,
                   mailbox_ ? mailbox_->fd() : -1};
}

bool PeerMesh::CanRead(const CopyProbe& probe) const {
  if (!options_.same_host_copy || probe.pid <= 0 || probe.address == 0) return false;
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

void PeerMesh::Ring(int peer) {
  if (MailboxLink* link = mailbox_to_[static_cast<size_t>(peer)].get()) link->Ring();
}

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

void PeerMesh::Wake() {
  Bell().Ring();
  cv_.notify_all();
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
  if (options_.spin) {
    spin = *options_.spin;
  } else if (mailbox_) {
    spin = kMailboxSpin;
    for (const SlotKey& piece : pieces) {
      if (!mailbox_to_[static_cast<size_t>(piece.peer)]) spin = std::chrono::microseconds(0);
    }
  }
  const auto started = Clock::now();
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
            return {WaitResult::kDone, i};
          case Progress::kFailed:
            return {WaitResult::kFailed, 0};
          case Progress::kPending:
            break;
        }
      }
      if (failure_) return {WaitResult::kFailed, 0};
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
    if (spin.count() > 0) {
      // Poll before sleeping: a piece due within the spin budget is seen
      // without the wake-up of a sleeping thread (docs/collectives.md,
      // "Waiting"). Yielding keeps the transport's thread running on a
      // machine with fewer cores than threads.
      const auto now = std::chrono::steady_clock::now();
      if (spin_until == std::chrono::steady_clock::time_point{}) {
        spin_until = std::min(deadline, now + spin);
      }
      if (now < spin_until) {
        while (bell.Value() == seen && std::chrono::steady_clock::now() < spin_until) {
          std::this_thread::yield();
        }
        continue;
      }
    }
    // Past the deadline: one last look, since a piece may have completed
    // right at it. From kCrossWait on, wake every 100 ms to look for a
    // crossed order (nothing rings for it).
    const auto until =
        pieces.empty()
            ? deadline
            : std::min(deadline, std::max(started + kCrossWait, Clock::now() + kCrossPoll));
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

bool PeerMesh::Complete(int peer, const MessageKey& key) const {
  std::lock_guard lock(mu_);
  auto it = slots_.find(SlotKey{peer, key});
  return it != slots_.end() && it->second.state == Slot::State::kDone;
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

void PeerMesh::Fail(FailureKind kind, const std::string& text) {
  {
    std::lock_guard lock(mu_);
    FailLocked(kind, text);
  }
  Wake();
  ReleaseUncopiedRefs();
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

int PeerMesh::OpenLinksLocked(int peer) const {
  int n = 0;
  for (const auto& [id, link] : links_) n += (link.rank == peer && link.open) ? 1 : 0;
  return n;
}

void PeerMesh::OnConnected(net::ConnectionId id, const net::PeerInfo& peer) {
  (void)id, (void)peer;  // an inbound connection is a mesh link once its hello arrived
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

void PeerMesh::OnMessage(net::ConnectionId id, net::Message&& m) {
  try {
    if (m.header.type == msg::kHello) {
      Hello hello = Hello::Decode(m.meta);
      std::optional<bool> ack;
      {
        std::lock_guard lock(mu_);
        if (self_rank_ < 0) {
          early_hellos_.emplace_back(id, hello);
          return;
        }
        ack = AcceptHelloLocked(id, hello);
      }
      if (ack) SendAck(id, *ack);
      Wake();
      return;
    }
    if (m.header.type == msg::kHelloAck) {
      OnHelloAck(id, m);
      return;
    }
    if (m.header.type == msg::kCopyStatus) {
      OnCopyStatus(id, m);
      return;
    }
    if (m.header.type == msg::kDataRef) {
      OnDataRef(id, m);
      return;
    }
    if (m.header.type == msg::kDataRefDone) {
      OnDataRefDone(id, m);
      return;
    }
    if (m.header.type == msg::kCallNotice) {
      OnCallNotice(id, m);
      return;
    }
    if (m.header.type != msg::kData) {
      throw ProtocolError(fmt::format("unexpected {}", net::MessageTypeName(m.header.type)));
    }
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
  } catch (const Error& e) {
    log_.Error("collective connection from {}: {}; closing it",
               transport_.Peer(id).address.ToString(), e.what());
    Fail(FailureKind::kProtocol, e.what());
    transport_.Close(id);
  }
}

void PeerMesh::OnHelloAck(net::ConnectionId id, const net::Message& m) {
  const HelloAck ack = HelloAck::Decode(m.meta);
  bool first_link = false;
  bool reads = false;
  {
    std::lock_guard lock(mu_);
    auto link = links_.find(id);
    if (link == links_.end()) throw ProtocolError("a hello acknowledgement for no hello");
    link->second.acked = true;
    const auto peer = static_cast<size_t>(link->second.rank);
    const auto& conns = outgoing_[peer];
    first_link = !conns.empty() && conns.front() == id;
    if (first_link) {
      peer_offers_[peer] = ack.probe.pid > 0 ? 1 : 0;
      peer_reads_me_[peer] = ack.reads_you ? 1 : 0;
      reads = CanRead(ack.probe);
      peer_pids_[peer] = reads ? ack.probe.pid : 0;
      if (reads) OpenMailboxLocked(static_cast<int>(peer), ack.probe);
    }
  }
  if (first_link) {
    net::OutgoingMessage status;
    status.header.type = msg::kCopyStatus;
    status.header.sender = self_id_;
    status.meta = CopyStatus{reads}.Encode();
    transport_.Send(id, std::move(status));
  }
  Wake();
}

void PeerMesh::OnCopyStatus(net::ConnectionId id, const net::Message& m) {
  const CopyStatus status = CopyStatus::Decode(m.meta);
  {
    std::lock_guard lock(mu_);
    auto link = links_.find(id);
    if (link == links_.end()) {
      throw ProtocolError("a copy status on a connection that sent no hello");
    }
    peer_reads_me_[static_cast<size_t>(link->second.rank)] = status.reads_you ? 1 : 0;
    status_heard_[static_cast<size_t>(link->second.rank)] = 1;
  }
  Wake();
}

void PeerMesh::OnDataRef(net::ConnectionId id, const net::Message& m) {
  const DataRef ref = DataRef::Decode(m.meta);
  int peer = -1;
  {
    std::lock_guard lock(mu_);
    auto link = links_.find(id);
    if (link == links_.end()) {
      throw ProtocolError("collective data on a connection that sent no hello");
    }
    peer = link->second.rank;
  }
  AcceptDataRef(peer, id, ref);
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
  int peer = -1;
  {
    std::lock_guard lock(mu_);
    auto link = links_.find(id);
    if (link == links_.end()) {
      throw ProtocolError("collective data on a connection that sent no hello");
    }
    peer = link->second.rank;
  }
  AcceptDataRefDone(peer, key);
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

void PeerMesh::SendAck(net::ConnectionId id, bool reads_you) {
  net::OutgoingMessage m;
  m.header.type = msg::kHelloAck;
  m.header.sender = self_id_;
  m.meta = HelloAck{OwnProbe(), reads_you}.Encode();
  transport_.Send(id, std::move(m));
}

void PeerMesh::SendRefDone(int peer, net::ConnectionId id, const MessageKey& key) {
  if (WriteMailbox(peer, msg::kDataRefDone, key, {})) return;
  net::OutgoingMessage m;
  m.header.type = msg::kDataRefDone;
  m.header.sender = self_id_;
  m.meta = key.Encode();
  transport_.Send(id, std::move(m));
}

std::optional<bool> PeerMesh::AcceptHelloLocked(net::ConnectionId id, const Hello& hello) {
  if (hello.rank <= self_rank_ || hello.rank >= size() ||
      hello.connections != static_cast<uint32_t>(options_.connections_per_peer) ||
      hello.connection >= hello.connections) {
    std::string text = fmt::format(
        "collective hello from {} claims rank {}, connection {} of {}; this worker is rank {} "
        "of {} with {} connection(s) per pair (TANDEM_COLLECTIVE_CONNECTIONS must match on "
        "every worker)",
        transport_.Peer(id).address.ToString(), hello.rank, hello.connection, hello.connections,
        self_rank_, size(), options_.connections_per_peer);
    log_.Error("{}", text);
    FailLocked(FailureKind::kProtocol, text);
    return std::nullopt;
  }
  links_[id] = Link{hello.rank, true, true};
  outgoing_[static_cast<size_t>(hello.rank)].push_back(id);
  if (hello.connection != 0) return false;
  peer_offers_[static_cast<size_t>(hello.rank)] = hello.probe.pid > 0 ? 1 : 0;
  const bool reads = CanRead(hello.probe);
  peer_pids_[static_cast<size_t>(hello.rank)] = reads ? hello.probe.pid : 0;
  if (reads) OpenMailboxLocked(hello.rank, hello.probe);
  return reads;
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
      if (first && !slots_.empty()) log_.Error("{}", failure_->text);
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

PeerMesh::CallState* PeerMesh::RegisterCommunicator(uint32_t communicator,
                                                    const std::vector<int>& members) {
  std::lock_guard lock(mu_);
  CallState& st = calls_[communicator];
  st.members = members;
  if (!st.begun) st.idle_since.store(Clock::now().time_since_epoch().count());
  return &st;
}

bool PeerMesh::AdmitLocked(int peer, const MessageKey& key) {
  if (!call_checks()) return true;
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
    if (!known) early_.push_back({key.communicator, key.sequence, peer, key.call, Clock::now()});
  }
  return true;
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

std::pair<PeerMesh::CallState*, bool> PeerMesh::BeginCall(uint32_t communicator, uint64_t sequence,
                                                          CallDescription::Sealed sealed) {
  std::lock_guard lock(mu_);
  CallState& st = calls_[communicator];
  st.begun = true;
  st.status.store(CallState::kRunning);
  st.sequence = sequence;
  st.probed.clear();
  st.blocked_peers.clear();
  st.fingerprint = sealed.fingerprint;
  st.description = std::move(sealed.encoding);
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
  return {&st, st.mismatch != sequence};
}

void PeerMesh::EndCall(CallState* state) {
  state->idle_since.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  uint8_t running = CallState::kRunning;
  state->status.compare_exchange_strong(running, CallState::kIdle);
}

bool PeerMesh::CompleteCall(CallState* state) {
  uint8_t running = CallState::kRunning;
  return state->status.compare_exchange_strong(running, CallState::kIdle) ||
         running == CallState::kIdle;
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
  for (const SlotKey& piece : pieces) {
    auto slot = slots_.find(piece);
    if (slot != slots_.end() && slot->second.state != Slot::State::kPosted) continue;
    for (const EarlyPiece& early : early_) {
      const uint32_t other = early.communicator;
      const uint64_t other_sequence = early.sequence;
      if (other == communicator || early.peer != piece.peer || now - early.at < kCrossWait) {
        continue;
      }
      auto st = calls_.find(other);
      const bool idle =
          st == calls_.end() ||
          (st->second.status.load() != CallState::kRunning &&
           now - Clock::time_point(Clock::duration(st->second.idle_since.load())) >= kCrossWait &&
           (!st->second.begun || st->second.sequence < other_sequence));
      if (!idle) continue;
      auto blocked = mine.blocked_peers.find(piece.peer);
      if (blocked == mine.blocked_peers.end() || blocked->second != sequence) {
        // Is the peer's caller blocked too? Ask (again after kCrossWait).
        auto asked = mine.probed.find(piece.peer);
        if (asked == mine.probed.end() || now - asked->second >= kCrossWait) {
          mine.probed[piece.peer] = now;
          out.emplace_back(piece.peer,
                           CallNotice{communicator, sequence, NoticeKind::kProbe, 0, {}, {}});
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
          CommunicatorName(communicator, mine.members), Describe(piece.peer), other_sequence,
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
      const std::vector<int> told =
          other_members.empty() ? std::vector<int>{piece.peer} : other_members;
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
