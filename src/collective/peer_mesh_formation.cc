// PeerMesh, forming the mesh (docs/protocol-collective.md): worker rank i
// opens `connections_per_peer` (K) connections to every worker j < i (so
// rank 0 only accepts) and sends kHello{i, k, K} first on connection k; j
// answers kHelloAck once it knows the link. A worker's mesh is complete
// once every connection it opened was acknowledged and it heard a hello on
// K connections and a kCopyStatus from every higher rank; data flows only
// on complete links.
//
// On connection 0 of each pair the hello and its acknowledgement carry the
// same-host probe (peer_mesh_same_host_copy.cc); the side that learns the
// other's verdict last says its own in kCopyStatus, so that both ends know
// the path before the first piece. A hello that arrives before Connect()
// knew the node table waits in `early_hellos_`.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "collective/peer_mesh.h"
#include "tandem/error.h"

namespace tandem::collective {

void PeerMesh::Connect(const cluster::NodeTable& table, int self_rank, int self_id) {
  SetUpTables(table, self_rank, self_id);
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
  std::vector<int> lower;
  for (int peer = 0; peer < self_rank_; ++peer) lower.push_back(peer);
  SendHellos(lower, 0, deadline);
  std::unique_lock lock(mu_);
  WaitFormedLocked(lock, deadline);
  LogFormedLocked();
  // Elastic from here on: a link lost while the mesh formed fails it as
  // in any job.
  elastic_ = options_.min_workers >= 1 && options_.min_workers < size();
}

void PeerMesh::ConnectJoining(const cluster::NodeTable& table, int self_rank, int self_id,
                              uint32_t epoch, const std::vector<int>& members) {
  joining_.store(true);
  SetUpTables(table, self_rank, self_id);
  std::vector<int> peers;
  {
    std::lock_guard lock(mu_);
    epoch_seen_.store(epoch, std::memory_order_release);
    for (int peer = 0; peer < size(); ++peer) {
      const bool member = std::find(members.begin(), members.end(), peer) != members.end();
      if (!member) departed_[static_cast<size_t>(peer)] = 1;
      if (member && peer != self_rank_) peers.push_back(peer);
    }
    early_hellos_.clear();  // nobody connects to a joining worker
  }
  const auto deadline = Clock::now() + options_.connect_timeout;
  SendHellos(peers, epoch, deadline);
  std::unique_lock lock(mu_);
  WaitFormedLocked(lock, deadline);
  join_formed_ = true;
  log_.Info(
      "collective links formed with workers [{}] as worker rank {}, admitted at membership epoch "
      "{} (TCP only: a joining worker shares no memory with the others)",
      fmt::join(peers, ", "), self_rank_, epoch);
  elastic_ = options_.min_workers >= 1 && options_.min_workers < size();
}

void PeerMesh::ExpectJoin(uint32_t epoch, const NodeInfo& node, const std::string& text) {
  ChangeMembership(epoch, -1, text);
  std::unique_ptr<MailboxLink> old_mailbox;
  std::vector<net::ConnectionId> acks;
  std::vector<std::pair<net::ConnectionId, std::string>> refused;
  {
    std::lock_guard lock(mu_);
    const int r = node.rank;
    if (r < 0 || r >= size() || r == self_rank_ || epoch < epoch_seen_.load()) return;
    const auto p = static_cast<size_t>(r);
    // The departed worker's links are closed already; their late news is
    // no longer this rank's.
    std::erase_if(links_, [&](const auto& entry) { return entry.second.rank == r; });
    outgoing_[p].clear();
    peer_reads_me_[p] = 0;
    peer_pids_[p] = 0;
    peer_offers_[p] = 0;
    status_heard_[p] = 1;
    departed_[p] = 0;
    lost_links_.erase(r);
    old_mailbox = std::move(mailbox_to_[p]);  // unmapped outside the lock
    joined_infos_.push_back(node);
    info_[p].store(&joined_infos_.back(), std::memory_order_release);
    joined_at_[r] = epoch;
    std::vector<std::pair<net::ConnectionId, Hello>> parked;
    parked.swap(join_hellos_);
    for (auto& [id, hello] : parked) {
      std::string why;
      if (AcceptJoinHelloLocked(id, hello, why)) {
        acks.push_back(id);
      } else if (!why.empty()) {
        refused.emplace_back(id, why);
      } else {
        join_hellos_.emplace_back(id, hello);
      }
    }
  }
  for (net::ConnectionId id : acks) SendAck(id, false);
  for (const auto& [id, why] : refused) {
    log_.Warn("{}", why);
    transport_.Close(id);
  }
  Wake();
}

bool PeerMesh::AcceptJoinHelloLocked(net::ConnectionId id, const Hello& hello,
                                     std::string& refuse) {
  auto admitted = joined_at_.find(hello.rank);
  if (admitted == joined_at_.end() || admitted->second != hello.joined_epoch) {
    if (hello.joined_epoch > epoch_seen_.load(std::memory_order_relaxed)) return false;  // early
    refuse = fmt::format(
        "collective join hello from {} as worker rank {} of membership epoch {}: no worker was "
        "admitted so (this worker is at epoch {}); connection closed",
        transport_.Peer(id).address.ToString(), hello.rank, hello.joined_epoch,
        epoch_seen_.load(std::memory_order_relaxed));
    return false;
  }
  auto& conns = outgoing_[static_cast<size_t>(hello.rank)];
  if (hello.connections != static_cast<uint32_t>(options_.connections_per_peer) ||
      hello.connection >= hello.connections ||
      conns.size() >= static_cast<size_t>(options_.connections_per_peer)) {
    refuse = fmt::format(
        "collective join hello from {} as worker rank {}: connection {} of {}, {} open already; "
        "this worker has {} connection(s) per pair (TANDEM_COLLECTIVE_CONNECTIONS must match)",
        transport_.Peer(id).address.ToString(), hello.rank, hello.connection, hello.connections,
        conns.size(), options_.connections_per_peer);
    return false;
  }
  links_[id] = Link{hello.rank, true, true};
  conns.push_back(id);
  return true;
}

void PeerMesh::WaitJoined(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  const auto k_count = static_cast<size_t>(options_.connections_per_peer);
  auto missing = [&] {
    std::vector<int> out;
    for (const auto& [r, epoch] : joined_at_) {
      const auto p = static_cast<size_t>(r);
      if (!departed_[p] && outgoing_[p].size() < k_count) out.push_back(r);
    }
    return out;
  };
  while (!failure_ && !missing().empty()) {
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && Clock::now() >= deadline) {
      break;
    }
  }
  const auto absent = missing();
  if (!absent.empty() && failure_) {
    failure_->Throw("waiting for the links of the workers that joined: ");
  }
  if (!absent.empty()) {
    std::string names;
    for (int r : absent) names += (names.empty() ? "" : ", ") + Describe(r);
    throw Timeout(
        fmt::format("worker rank {} did not hear from {}, admitted into the job, within {} ms "
                    "(TANDEM_CONNECT_TIMEOUT)",
                    self_rank_, names, options_.connect_timeout.count()));
  }
}

std::vector<int> PeerMesh::JoinedSince(uint32_t epoch) const {
  std::lock_guard lock(mu_);
  std::vector<int> out;
  for (const auto& [r, at] : joined_at_) {
    if (at > epoch) out.push_back(r);
  }
  return out;
}

void PeerMesh::SetUpTables(const cluster::NodeTable& table, int self_rank, int self_id) {
  std::vector<NodeInfo> workers(static_cast<size_t>(table.num_workers));
  for (const NodeInfo& n : table.nodes) {
    if (n.role == Role::kWorker) workers[static_cast<size_t>(n.rank)] = n;
  }
  std::lock_guard lock(mu_);
  workers_ = std::move(workers);
  info_ = std::make_unique<std::atomic<const NodeInfo*>[]>(workers_.size());
  for (size_t r = 0; r < workers_.size(); ++r) info_[r].store(&workers_[r]);
  self_rank_ = self_rank;
  self_id_ = self_id;
  outgoing_.assign(workers_.size(), {});
  peer_reads_me_.assign(workers_.size(), 0);
  peer_pids_.assign(workers_.size(), 0);
  peer_offers_.assign(workers_.size(), 0);
  status_heard_.assign(workers_.size(), 0);
  mailbox_to_.resize(workers_.size());
  ring_broken_.assign(workers_.size(), 0);
  departed_.assign(workers_.size(), 0);
  if (options_.same_host_copy && options_.mailbox && !joining_.load() && workers_.size() > 1 &&
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

void PeerMesh::SendHellos(const std::vector<int>& peers, uint32_t joined_epoch,
                          std::chrono::steady_clock::time_point deadline) {
  const int k_count = options_.connections_per_peer;
  for (int peer : peers) {
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
      Hello hello{
          self_rank_, static_cast<uint32_t>(k), static_cast<uint32_t>(k_count), {}, joined_epoch};
      if (k == 0) hello.probe = OwnProbe();
      m.meta = hello.Encode();
      transport_.Send(id, std::move(m));
    }
  }
}

std::vector<int> PeerMesh::MissingLocked() {
  const int k_count = options_.connections_per_peer;
  std::vector<int> out;
  const bool joining = joining_.load();
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == self_rank_ || departed_[static_cast<size_t>(peer)]) continue;
    const auto& conns = outgoing_[static_cast<size_t>(peer)];
    bool complete = static_cast<int>(conns.size()) == k_count;
    if (peer < self_rank_ || joining) {
      for (net::ConnectionId id : conns) complete = complete && links_[id].acked;
    } else {
      // Its verdict on our probe, so that both ends know the path first.
      complete = complete && status_heard_[static_cast<size_t>(peer)];
    }
    if (!complete) out.push_back(peer);
  }
  return out;
}

void PeerMesh::WaitFormedLocked(std::unique_lock<std::mutex>& lock,
                                std::chrono::steady_clock::time_point deadline) {
  const base::SteadyClock steady;
  base::WaitReport report(steady, options_.wait_report_interval);
  while (!failure_ && !MissingLocked().empty()) {
    const auto wake = std::min(deadline, Clock::now() + report.NextIn());
    if (cv_.wait_until(lock, wake) == std::cv_status::timeout && Clock::now() >= deadline) break;
    if (report.TakeDue()) {
      std::string names;
      for (int r : MissingLocked()) names += (names.empty() ? "" : ", ") + Describe(r);
      if (!names.empty()) {
        log_.Warn(
            "forming the collective mesh: worker rank {} still waits for {} {} (gives up "
            "after {} s, TANDEM_CONNECT_TIMEOUT)",
            self_rank_, names, report.Lasted(),
            std::chrono::duration_cast<std::chrono::seconds>(options_.connect_timeout).count());
      }
    }
  }
  if (failure_) failure_->Throw("forming the collective mesh failed: ");
  auto absent = MissingLocked();
  if (!absent.empty()) {
    std::string names;
    for (int r : absent) names += (names.empty() ? "" : ", ") + Describe(r);
    throw Timeout(
        fmt::format("forming the collective mesh: worker rank {} did not hear from {} within {} ms "
                    "(TANDEM_CONNECT_TIMEOUT)",
                    self_rank_, names, options_.connect_timeout.count()));
  }
}

void PeerMesh::LogFormedLocked() {
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
      size(), options_.connections_per_peer, copy_peers, size() - 1,
      options_.same_host_copy ? "" : " (TANDEM_COLLECTIVE_SAME_HOST_COPY=0)", mailbox_peers,
      options_.mailbox ? "" : " (TANDEM_COLLECTIVE_MAILBOX=0)");
}

void PeerMesh::OnHello(net::ConnectionId id, const net::Message& m) {
  Hello hello = Hello::Decode(m.meta);
  if (hello.joined_epoch > 0) {
    bool accepted = false;
    std::string refuse;
    {
      std::lock_guard lock(mu_);
      if (self_rank_ < 0 || (joining_.load() && !join_formed_)) {
        refuse = fmt::format("collective join hello from {} before this worker's links formed",
                             transport_.Peer(id).address.ToString());
      } else {
        accepted = AcceptJoinHelloLocked(id, hello, refuse);
        if (!accepted && refuse.empty()) {
          if (join_hellos_.size() >= kMaxParkedJoinHellos) {
            refuse = fmt::format("{} join hellos wait for their admission; refusing more",
                                 join_hellos_.size());
          } else {
            join_hellos_.emplace_back(id, hello);  // its admission's notice is on its way
          }
        }
      }
    }
    if (accepted) SendAck(id, false);
    if (!refuse.empty()) {
      log_.Warn("{}", refuse);
      transport_.Close(id);
    }
    Wake();
    return;
  }
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
  const bool reads = CanRead(hello.probe, hello.rank);
  peer_pids_[static_cast<size_t>(hello.rank)] = reads ? hello.probe.pid : 0;
  if (reads) OpenMailboxLocked(hello.rank, hello.probe);
  return reads;
}

void PeerMesh::SendAck(net::ConnectionId id, bool reads_you) {
  net::OutgoingMessage m;
  m.header.type = msg::kHelloAck;
  m.header.sender = self_id_;
  m.meta = HelloAck{OwnProbe(), reads_you}.Encode();
  transport_.Send(id, std::move(m));
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
      reads = CanRead(ack.probe, static_cast<int>(peer));
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

bool PeerMesh::OffersCopy(int rank) const {
  if (rank == self_rank_) return options_.same_host_copy && !joining_.load();
  std::lock_guard lock(mu_);
  return peer_offers_.at(static_cast<size_t>(rank)) != 0;
}

}  // namespace tandem::collective
