#include "cluster/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "tandem/error.h"

namespace tandem::cluster {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

double Seconds(milliseconds d) { return static_cast<double>(d.count()) / 1000.0; }

int ExpectedOf(Role role, int num_servers, int num_workers) {
  switch (role) {
    case Role::kScheduler:
      return 1;
    case Role::kServer:
      return num_servers;
    case Role::kWorker:
      return num_workers;
  }
  return 0;
}

}  // namespace

Scheduler::Scheduler(Options options, net::Transport& transport, const base::Logger& log,
                     const base::Clock& clock)
    : options_(options),
      transport_(transport),
      log_(log),
      clock_(clock),
      start_(clock.Now()),
      start_report_(clock, options_.wait_report_interval),
      watchdog_([this] { WatchdogLoop(); }) {}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  watchdog_.join();
}

net::OutgoingMessage Scheduler::MakeMessage(uint16_t type, int recipient, std::string meta,
                                            uint64_t request_id, uint32_t flags) const {
  net::OutgoingMessage m;
  m.header.type = type;
  m.header.flags = flags;
  m.header.sender = 0;
  m.header.recipient = recipient;
  m.header.request_id = request_id;
  m.meta = std::move(meta);
  return m;
}

void Scheduler::Flush(Outbox& out) {
  for (auto& [conn, m] : out.sends) transport_.Send(conn, std::move(m));
  for (auto conn : out.closes) transport_.Close(conn);
  out.sends.clear();
  out.closes.clear();
}

void Scheduler::OnConnected(net::ConnectionId id, const net::PeerInfo& peer) {
  std::lock_guard lock(mu_);
  open_connections_.insert(id);
  log_.V1("scheduler: connection {} from {}", id, peer.address.ToString());
}

void Scheduler::OnMessage(net::ConnectionId id, net::Message&& msg) {
  Outbox out;
  {
    std::lock_guard lock(mu_);
    try {
      auto it = node_of_conn_.find(id);
      if (msg.header.type == msg::kRegister) {
        if (it != node_of_conn_.end()) {
          throw ProtocolError(fmt::format("node {} registered twice", it->second));
        }
        HandleRegister(id, msg, out);
      } else if (it == node_of_conn_.end()) {
        bool pending = std::any_of(pending_.begin(), pending_.end(),
                                   [&](const Pending& p) { return p.conn == id; }) ||
                       std::any_of(joiners_.begin(), joiners_.end(),
                                   [&](const Joiner& j) { return j.conn == id; });
        if (!pending) {
          throw ProtocolError(fmt::format("message type {} before registering", msg.header.type));
        }
        // A registered node waiting for the table may already send
        // heartbeats; nothing else is meaningful yet.
        if (msg.header.type != msg::kHeartbeat) {
          throw ProtocolError(
              fmt::format("message type {} before the job formed", msg.header.type));
        }
      } else {
        int node = it->second;
        if (states_[static_cast<size_t>(node)].departed) {
          // Sent before its connection was closed; it no longer counts.
          log_.V1("scheduler: ignoring message type {} from {}, which left the job",
                  msg.header.type, table_->nodes[static_cast<size_t>(node)].ToString());
          return;
        }
        states_[static_cast<size_t>(node)].last_seen = clock_.Now();
        switch (msg.header.type) {
          case msg::kBarrier:
            HandleBarrier(node, msg, out);
            break;
          case msg::kHeartbeat:
            out.sends.emplace_back(id, MakeMessage(msg::kHeartbeatAck, node, {}));
            break;
          case msg::kStopJob:
            StopJob(node, JobStopRequest::Decode(msg.meta), out);
            break;
          case msg::kLeave:
            if (!states_[static_cast<size_t>(node)].left) {
              states_[static_cast<size_t>(node)].left = true;
              ++left_count_;
              log_.V1("scheduler: {} left ({} of {} nodes)", table_->nodes[node].ToString(),
                      left_count_, table_->nodes.size());
              if (left_count_ + departed_count_ == static_cast<int>(table_->nodes.size())) {
                for (const Joiner& j : joiners_) {
                  Reject(j.conn, "the job finished before a worker's place was free", out);
                }
                joiners_.clear();
              }
              cv_.notify_all();
            }
            break;
          default:
            throw ProtocolError(fmt::format("unexpected message type {}", msg.header.type));
        }
      }
    } catch (const ProtocolError& e) {
      log_.Warn("scheduler: dropping connection {} ({}): {}", id,
                transport_.Peer(id).address.ToString(), e.what());
      out.closes.push_back(id);
    }
  }
  Flush(out);
}

void Scheduler::HandleRegister(net::ConnectionId conn, const net::Message& msg, Outbox& out) {
  RegisterRequest req = RegisterRequest::Decode(msg.meta);
  std::string who = fmt::format("{} at {}:{} (pid {} on {})", RoleName(req.role), req.host,
                                req.port, req.pid, req.hostname);
  if (failure_) {
    Reject(conn, fmt::format("the job has failed: {}", *failure_), out);
    return;
  }
  if (table_) {
    QueueJoiner(conn, std::move(req), who, out);
    return;
  }
  int expected = ExpectedOf(req.role, options_.num_servers, options_.num_workers);
  int have =
      static_cast<int>(std::count_if(pending_.begin(), pending_.end(),
                                     [&](const Pending& p) { return p.request.role == req.role; }));
  if (have >= expected) {
    Reject(conn,
           fmt::format("{} tried to join, but the job expects {} {}(s) and all have "
                       "registered (check DMLC_NUM_SERVER / DMLC_NUM_WORKER)",
                       who, expected, RoleName(req.role)),
           out);
    return;
  }
  if (req.requested_rank >= 0) {
    if (req.requested_rank >= expected) {
      Reject(conn,
             fmt::format("{} asked for rank {}, but the job has only {} {}(s)", who,
                         req.requested_rank, expected, RoleName(req.role)),
             out);
      return;
    }
    for (const auto& p : pending_) {
      if (p.request.role == req.role && p.request.requested_rank == req.requested_rank) {
        Reject(conn,
               fmt::format("{} asked for rank {}, which {} at {}:{} already holds", who,
                           req.requested_rank, RoleName(req.role), p.request.host, p.request.port),
               out);
        return;
      }
    }
  }
  pending_.push_back({conn, std::move(req)});
  size_t total = static_cast<size_t>(options_.num_servers + options_.num_workers + 1);
  log_.V1("scheduler: registered {} ({} of {} nodes)", who, pending_.size(), total);
  if (pending_.size() == total) FormJob(out);
}

void Scheduler::FormJob(Outbox& out) {
  // Ranks: a requested rank is honoured; the others fill the free ranks in
  // the order of (host, port), so a job with the same addresses gets the same
  // ranks every time, whatever order registrations arrived in.
  NodeTable t;
  t.num_servers = options_.num_servers;
  t.num_workers = options_.num_workers;
  std::vector<net::ConnectionId> conn_of_id;
  for (Role role : {Role::kScheduler, Role::kServer, Role::kWorker}) {
    int count = ExpectedOf(role, options_.num_servers, options_.num_workers);
    std::vector<const Pending*> by_rank(static_cast<size_t>(count), nullptr);
    std::vector<const Pending*> unplaced;
    for (const auto& p : pending_) {
      if (p.request.role != role) continue;
      if (p.request.requested_rank >= 0) {
        by_rank[static_cast<size_t>(p.request.requested_rank)] = &p;
      } else {
        unplaced.push_back(&p);
      }
    }
    std::sort(unplaced.begin(), unplaced.end(), [](const Pending* a, const Pending* b) {
      return std::tie(a->request.host, a->request.port, a->request.pid) <
             std::tie(b->request.host, b->request.port, b->request.pid);
    });
    size_t next = 0;
    for (auto& slot : by_rank) {
      if (slot == nullptr) slot = unplaced[next++];
    }
    for (int rank = 0; rank < count; ++rank) {
      const Pending* p = by_rank[static_cast<size_t>(rank)];
      NodeInfo n;
      n.id = static_cast<int>(t.nodes.size());
      n.role = role;
      n.rank = rank;
      n.host = p->request.host;
      n.port = p->request.port;
      t.nodes.push_back(n);
      conn_of_id.push_back(p->conn);
    }
  }
  std::string encoded = t.Encode();
  auto now = clock_.Now();
  states_.assign(t.nodes.size(), NodeState{});
  for (size_t id = 0; id < t.nodes.size(); ++id) {
    states_[id].conn = conn_of_id[id];
    states_[id].last_seen = now;
    node_of_conn_[conn_of_id[id]] = static_cast<int>(id);
    out.sends.emplace_back(conn_of_id[id],
                           MakeMessage(msg::kNodeTable, static_cast<int>(id), encoded));
  }
  pending_.clear();
  table_ = std::move(t);
  log_.Info("scheduler: all {} nodes registered after {:.3f} s ({} servers, {} workers)",
            table_->nodes.size(), Seconds(duration_cast<milliseconds>(now - start_)),
            options_.num_servers, options_.num_workers);
  for (const auto& n : table_->nodes) log_.V1("scheduler: node table: {}", n.ToString());
}

std::vector<int> Scheduler::MembersOf(int groups) const {
  std::vector<int> ids;
  for (const auto& n : table_->nodes) {
    if (InGroups(n, groups) && !states_[static_cast<size_t>(n.id)].departed) ids.push_back(n.id);
  }
  return ids;
}

int Scheduler::RemainingWorkers() const { return table_->num_workers - departed_count_; }

bool Scheduler::Elastic() const {
  return options_.min_workers >= 1 && options_.min_workers < options_.num_workers;
}

bool Scheduler::WaitsBelowMinimum() const {
  return Elastic() && options_.num_servers == 0 && options_.elastic_timeout.count() > 0;
}

bool Scheduler::BarrierReady(int groups, const BarrierState& b) const {
  if (b.arrived.empty() || b.arrived.size() != MembersOf(groups).size()) return false;
  if (groups != group::kWorkers || !b.admit || b.final || !below_minimum_since_) return true;
  // A regroup below the minimum waits until it can admit a worker: the
  // workers do not go on training with fewer than min_workers.
  const std::vector<int> places = PlaceJoiners();
  return std::any_of(places.begin(), places.end(), [](int place) { return place >= 0; });
}

void Scheduler::CompleteReadyBarriers(Outbox& out) {
  std::vector<int> ready;
  for (const auto& [groups, b] : barriers_) {
    if (BarrierReady(groups, b)) ready.push_back(groups);
  }
  for (int groups : ready) {
    log_.V1("scheduler: barrier #{} over {} complete", barriers_.at(groups).sequence,
            GroupsName(groups));
    CompleteBarrier(groups, out);
  }
}

void Scheduler::HandleBarrier(int node, const net::Message& msg, Outbox& out) {
  BarrierRequest req = BarrierRequest::Decode(msg.meta);
  const NodeInfo& who = table_->nodes[static_cast<size_t>(node)];
  if (!InGroups(who, req.groups)) {
    throw ProtocolError(fmt::format("{} asked for a barrier over {}, a group it is not in",
                                    who.ToString(), GroupsName(req.groups)));
  }
  BarrierState& b = barriers_[req.groups];
  const bool admit = (req.flags & BarrierRequest::kAdmit) != 0;
  if (b.arrived.empty()) {
    b.sequence = req.sequence;
    b.final = (req.flags & BarrierRequest::kFinal) != 0;
    b.admit = admit;
    b.started = clock_.Now();
  } else if (b.sequence != req.sequence || b.final != ((req.flags & BarrierRequest::kFinal) != 0)) {
    // Nodes disagree on how many barriers they have passed over this group,
    // or one is finalizing while another waits at an ordinary barrier: one
    // of them skipped or repeated one. Fail the barrier on everyone instead
    // of pairing barriers that do not belong together.
    b.arrived.emplace(node, msg.header.request_id);
    auto describe = [](uint64_t sequence, bool final) {
      return final ? fmt::format("#{} (its final barrier, Finalize)", sequence)
                   : fmt::format("#{}", sequence);
    };
    std::string text =
        fmt::format("barrier over {}: {} is at barrier {} but the nodes already waiting are at {}",
                    GroupsName(req.groups), who.ToString(),
                    describe(req.sequence, (req.flags & BarrierRequest::kFinal) != 0),
                    describe(b.sequence, b.final));
    FinishBarrier(b, msg::kBarrierFailed, /*timed_out=*/false, text, out);
    barriers_.erase(req.groups);
    return;
  }
  b.admit = b.admit && admit;
  b.arrived.emplace(node, msg.header.request_id);
  log_.V2("scheduler: barrier #{} over {}: {} arrived ({} of {})", b.sequence,
          GroupsName(req.groups), who.ToString(), b.arrived.size(), MembersOf(req.groups).size());
  if (BarrierReady(req.groups, b)) {
    log_.V1("scheduler: barrier #{} over {} complete", b.sequence, GroupsName(req.groups));
    CompleteBarrier(req.groups, out);
  } else if (b.arrived.size() == MembersOf(req.groups).size()) {
    log_.Info(
        "scheduler: the workers' regroup #{} waits for a worker to join: {} of {} workers remain, "
        "below the minimum of {} (gives up {:.0f} s after the job went below it, "
        "TANDEM_ELASTIC_TIMEOUT)",
        b.sequence, RemainingWorkers(), table_->num_workers, options_.min_workers,
        Seconds(options_.elastic_timeout));
  }
}

void Scheduler::CompleteBarrier(int groups, Outbox& out) {
  BarrierState b = std::move(barriers_.at(groups));
  barriers_.erase(groups);
  passed_[groups] = b.sequence;
  // The notices of admissions go out before the release, on the same
  // connections: every member's barrier answer counts the new workers.
  if (groups == group::kWorkers && b.admit && !b.final) AdmitJoiners(out);
  FinishBarrier(b, msg::kBarrierDone, false, {}, out);
}

int Scheduler::WorkerNode(int rank) const {
  for (const auto& n : table_->nodes) {
    if (n.role == Role::kWorker && n.rank == rank) return n.id;
  }
  return -1;
}

void Scheduler::QueueJoiner(net::ConnectionId conn, RegisterRequest req, const std::string& who,
                            Outbox& out) {
  if (req.role != Role::kWorker || !Elastic()) {
    Reject(conn,
           fmt::format("{} tried to join, but the job has already formed with {} servers and {} "
                       "workers{}",
                       who, options_.num_servers, options_.num_workers,
                       req.role == Role::kWorker
                           ? " and is not elastic (TANDEM_MIN_WORKERS, tandem launch --workers "
                             "MIN:MAX)"
                           : ""),
           out);
    return;
  }
  if (options_.num_servers > 0) {
    Reject(conn,
           fmt::format("{} tried to join a running job with {} server(s); workers join only "
                       "jobs without servers so far (docs/elastic.md, \"Workers that join\")",
                       who, options_.num_servers),
           out);
    return;
  }
  if (req.requested_rank >= options_.num_workers) {
    Reject(conn,
           fmt::format("{} asked for rank {}, but the job has only {} worker places", who,
                       req.requested_rank, options_.num_workers),
           out);
    return;
  }
  for (const Joiner& j : joiners_) {
    if (req.requested_rank >= 0 && j.request.requested_rank == req.requested_rank) {
      Reject(
          conn,
          fmt::format("{} asked for rank {}, which {} at {}:{} waits for already", who,
                      req.requested_rank, RoleName(j.request.role), j.request.host, j.request.port),
          out);
      return;
    }
  }
  joiners_.push_back({conn, std::move(req), clock_.Now()});
  const int place = PlaceJoiners().back();
  std::string text =
      place >= 0
          ? fmt::format(
                "waiting to join the running job as worker {}: the workers admit it at their "
                "next regroup (the elastic loop's next commit)",
                place)
          : fmt::format(
                "waiting to join the running job: all {} worker places are taken; it takes the "
                "place of the next worker to leave (gives up after {:.0f} s, "
                "TANDEM_START_TIMEOUT)",
                options_.num_workers, Seconds(options_.start_timeout));
  log_.Info("scheduler: {} {}", who, text);
  out.sends.emplace_back(conn, MakeMessage(msg::kJoinQueued, -1, EncodeText(text)));
  AnnounceJoiners(out);
  // A regroup held below the minimum can admit this worker now.
  CompleteReadyBarriers(out);
}

std::vector<int> Scheduler::PlaceJoiners() const {
  std::set<int> free;
  for (const auto& n : table_->nodes) {
    if (n.role == Role::kWorker && states_[static_cast<size_t>(n.id)].departed) {
      free.insert(n.rank);
    }
  }
  std::vector<int> places(joiners_.size(), -1);
  for (size_t i = 0; i < joiners_.size(); ++i) {
    const int asked = joiners_[i].request.requested_rank;
    if (asked >= 0 && free.erase(asked) > 0) places[i] = asked;
  }
  for (size_t i = 0; i < joiners_.size(); ++i) {
    if (joiners_[i].request.requested_rank >= 0 || free.empty()) continue;
    places[i] = *free.begin();
    free.erase(free.begin());
  }
  return places;
}

void Scheduler::AdmitJoiners(Outbox& out) {
  const std::vector<int> places = PlaceJoiners();
  std::vector<Joiner> waiting;
  const auto now = clock_.Now();
  bool admitted = false;
  for (size_t i = 0; i < joiners_.size(); ++i) {
    // One per regroup: a joiner forms its links with members that knew of
    // its admission, so two joiners never meet half-formed. The others are
    // still announced, and the next commit regroups again.
    if (places[i] < 0 || admitted) {
      waiting.push_back(std::move(joiners_[i]));
      continue;
    }
    admitted = true;
    const Joiner& j = joiners_[i];
    const int id = WorkerNode(places[i]);
    NodeState& s = states_[static_cast<size_t>(id)];
    // The departed worker's connection no longer names this node.
    node_of_conn_.erase(s.conn);
    s = NodeState{};
    s.conn = j.conn;
    s.last_seen = now;
    node_of_conn_[j.conn] = id;
    --departed_count_;
    ++epoch_;
    NodeInfo& n = table_->nodes[static_cast<size_t>(id)];
    n.host = j.request.host;
    n.port = j.request.port;
    WorkerJoinedNotice notice;
    notice.epoch = epoch_;
    notice.node = n;
    for (const auto& m : table_->nodes) {
      if (m.role == Role::kWorker && !states_[static_cast<size_t>(m.id)].departed) {
        notice.workers.push_back(m.rank);
      }
    }
    log_.Warn(
        "scheduler: {} (pid {} on {}) joined the job in the place of a departed worker; {} of "
        "{} workers (membership epoch {})",
        n.ToString(), j.request.pid, j.request.hostname, notice.workers.size(), table_->num_workers,
        epoch_);
    const std::string meta = notice.Encode();
    for (size_t other = 0; other < states_.size(); ++other) {
      if (states_[other].left || static_cast<int>(other) == id) continue;
      out.sends.emplace_back(states_[other].conn,
                             MakeMessage(msg::kWorkerJoined, static_cast<int>(other), meta));
    }
    Admission admission;
    admission.table = *table_;
    admission.epoch = epoch_;
    admission.workers = notice.workers;
    for (const auto& [groups, passed] : passed_) {
      if (!barriers_.contains(groups)) admission.barriers.emplace_back(groups, passed);
    }
    // A barrier open now (the others' final one) counts the new worker
    // from now on: its next barrier over that mask is that one.
    for (const auto& [groups, b] : barriers_)
      admission.barriers.emplace_back(groups, b.sequence - 1);
    if (below_minimum_since_) {
      admission.joined_below_minimum = joined_below_minimum_;
      // Never there yet: a departure takes its rank out of the list.
      joined_below_minimum_.insert(
          std::upper_bound(joined_below_minimum_.begin(), joined_below_minimum_.end(), n.rank),
          n.rank);
    }
    out.sends.emplace_back(j.conn, MakeMessage(msg::kAdmitted, id, admission.Encode()));
  }
  joiners_ = std::move(waiting);
  if (admitted && below_minimum_since_ && RemainingWorkers() >= options_.min_workers) {
    log_.Warn("scheduler: back to {} workers, the minimum, after {:.3f} s below it",
              RemainingWorkers(),
              Seconds(std::chrono::duration_cast<std::chrono::milliseconds>(
                  clock_.Now() - *below_minimum_since_)));
    below_minimum_since_.reset();
    below_minimum_loss_.reset();
    joined_below_minimum_.clear();
  }
  AnnounceJoiners(out);
}

void Scheduler::AnnounceJoiners(Outbox& out) {
  if (!table_) return;
  uint32_t admissible = 0;
  for (int place : PlaceJoiners()) admissible += place >= 0 ? 1 : 0;
  if (admissible == announced_joiners_) return;
  announced_joiners_ = admissible;
  const std::string meta = JoinPendingNotice{admissible}.Encode();
  for (const auto& n : table_->nodes) {
    const NodeState& s = states_[static_cast<size_t>(n.id)];
    if (n.role != Role::kWorker || s.left) continue;
    out.sends.emplace_back(s.conn, MakeMessage(msg::kJoinPending, n.id, meta));
  }
}

void Scheduler::FinishBarrier(BarrierState& b, uint16_t type, bool timed_out,
                              const std::string& text, Outbox& out) {
  for (const auto& [id, request_id] : b.arrived) {
    std::string meta =
        type == msg::kBarrierFailed ? BarrierFailure{timed_out, text}.Encode() : std::string();
    out.sends.emplace_back(states_[static_cast<size_t>(id)].conn,
                           MakeMessage(type, id, std::move(meta), request_id,
                                       net::flags::kResponse |
                                           (type == msg::kBarrierFailed ? net::flags::kError : 0)));
  }
}

void Scheduler::Reject(net::ConnectionId conn, const std::string& reason, Outbox& out) {
  log_.Warn("scheduler: rejecting connection {}: {}", conn, reason);
  out.sends.emplace_back(
      conn, MakeMessage(msg::kRejected, -1, EncodeText(reason), 0, net::flags::kError));
}

void Scheduler::FailJob(const std::string& reason, Outbox& out) {
  if (failure_) return;
  failure_ = reason;
  log_.Error("scheduler: job failed: {}", reason);
  cv_.notify_all();
  (void)out;
}

void Scheduler::DeclareLost(int node, const std::string& reason, Outbox& out) {
  NodeState& s = states_[static_cast<size_t>(node)];
  if (s.left) return;
  const NodeInfo& lost = table_->nodes[static_cast<size_t>(node)];
  if (failure_) {
    // After the first loss the others exit on purpose; their departures are
    // consequences, not news.
    log_.V1("scheduler: {} gone after the job failed: {}", lost.ToString(), reason);
    s.left = true;
    return;
  }
  // Below the minimum the job waits for joiners where workers can join
  // (WaitsBelowMinimum); the last worker's loss always ends it.
  if (lost.role == Role::kWorker && Elastic() &&
      (RemainingWorkers() - 1 >= options_.min_workers ||
       (WaitsBelowMinimum() && RemainingWorkers() - 1 >= 1))) {
    DepartWorker(node, reason, out);
    return;
  }
  s.left = true;
  out.closes.push_back(s.conn);
  std::string why = reason;
  if (lost.role == Role::kWorker && Elastic()) {
    why += fmt::format(
        "; {} worker(s) would remain, below the minimum of {} (TANDEM_MIN_WORKERS, tandem launch "
        "--workers MIN:MAX){}",
        RemainingWorkers() - 1, options_.min_workers,
        RemainingWorkers() - 1 == 0 ? ""
        : options_.num_servers > 0
            ? ", and a job with servers cannot wait for new workers (workers join only jobs "
              "without servers so far)"
            : ", and TANDEM_ELASTIC_TIMEOUT=0 waits for no new worker");
  }
  NodeLostNotice notice{lost, why};
  std::string meta = notice.Encode();
  for (size_t id = 0; id < states_.size(); ++id) {
    if (static_cast<int>(id) == node || states_[id].left) continue;
    out.sends.emplace_back(states_[id].conn,
                           MakeMessage(msg::kNodeLost, static_cast<int>(id), meta));
  }
  FailJob(fmt::format("lost {}: {}", lost.ToString(), why), out);
}

void Scheduler::FailBelowMinimum(Outbox& out) {
  const auto& [lost, reason] = *below_minimum_loss_;
  // Below the minimum a place is free, so a joiner that waits could have
  // been admitted.
  const bool waiting = !joiners_.empty();
  const std::string why = fmt::format(
      "{}; {} of {} workers remained, below the minimum of {} (TANDEM_MIN_WORKERS, tandem launch "
      "--workers MIN:MAX), and {} within {:.0f} s (TANDEM_ELASTIC_TIMEOUT)",
      reason, RemainingWorkers(), table_->num_workers, options_.min_workers,
      waiting ? "the workers did not regroup to admit the worker that waits to join (the elastic "
                "loop's commits admit new workers)"
              : "no worker joined",
      Seconds(options_.elastic_timeout));
  const std::string meta = NodeLostNotice{lost, why}.Encode();
  for (size_t id = 0; id < states_.size(); ++id) {
    if (states_[id].left) continue;
    out.sends.emplace_back(states_[id].conn,
                           MakeMessage(msg::kNodeLost, static_cast<int>(id), meta));
  }
  const std::string text = fmt::format("the job failed: lost {}: {}", lost.ToString(), why);
  for (const Joiner& j : joiners_) {
    out.sends.emplace_back(
        j.conn, MakeMessage(msg::kStartTimedOut, -1, EncodeText(text), 0, net::flags::kError));
  }
  joiners_.clear();
  FailJob(fmt::format("lost {}: {}", lost.ToString(), why), out);
}

void Scheduler::DepartWorker(int node, const std::string& reason, Outbox& out) {
  NodeState& s = states_[static_cast<size_t>(node)];
  const NodeInfo& gone = table_->nodes[static_cast<size_t>(node)];
  s.left = true;
  s.departed = true;
  ++departed_count_;
  std::erase(joined_below_minimum_, gone.rank);
  ++epoch_;
  out.closes.push_back(s.conn);
  WorkerLeftNotice notice;
  notice.epoch = epoch_;
  notice.node = gone;
  notice.reason = reason;
  for (const auto& n : table_->nodes) {
    if (n.role == Role::kWorker && !states_[static_cast<size_t>(n.id)].departed) {
      notice.remaining.push_back(n.rank);
    }
  }
  if (static_cast<int>(notice.remaining.size()) >= options_.min_workers) {
    log_.Warn(
        "scheduler: {} left the job: {}; {} of {} workers go on (membership epoch {}, minimum {})",
        gone.ToString(), reason, notice.remaining.size(), table_->num_workers, epoch_,
        options_.min_workers);
  } else {
    if (!below_minimum_since_) below_minimum_since_ = clock_.Now();
    below_minimum_loss_ = {gone, reason};
    log_.Warn(
        "scheduler: {} left the job: {}; {} of {} workers remain, below the minimum of {}: the "
        "job waits for workers to join and the workers' regroups wait with it, up to {:.0f} s "
        "(TANDEM_ELASTIC_TIMEOUT) since it went below the minimum (membership epoch {})",
        gone.ToString(), reason, notice.remaining.size(), table_->num_workers, options_.min_workers,
        Seconds(options_.elastic_timeout), epoch_);
  }
  std::string meta = notice.Encode();
  for (size_t id = 0; id < states_.size(); ++id) {
    if (states_[id].left) continue;
    out.sends.emplace_back(states_[id].conn,
                           MakeMessage(msg::kWorkerLeft, static_cast<int>(id), meta));
  }
  // A barrier that waited only for the departed worker completes now; one it
  // had already arrived at no longer counts it.
  for (auto& [groups, b] : barriers_) b.arrived.erase(node);
  CompleteReadyBarriers(out);
  AnnounceJoiners(out);
  cv_.notify_all();
}

void Scheduler::StopJob(int node, const JobStopRequest& request, Outbox& out) {
  const NodeInfo& origin = table_->nodes[static_cast<size_t>(node)];
  if (failure_) {
    log_.V1("scheduler: {} asked to stop the job after it failed: {}", origin.ToString(),
            request.reason);
    return;
  }
  // Every node, the origin too: it fails on this answer, not before, so its
  // request is never lost to its own exit.
  std::string meta = JobStoppedNotice{origin, request.kind, request.reason}.Encode();
  for (size_t id = 0; id < states_.size(); ++id) {
    if (states_[id].left) continue;
    out.sends.emplace_back(states_[id].conn,
                           MakeMessage(msg::kJobStopped, static_cast<int>(id), meta));
  }
  FailJob(fmt::format("{} stopped the job: {}", origin.ToString(), request.reason), out);
}

void Scheduler::OnDisconnected(net::ConnectionId id, const std::string& reason) {
  Outbox out;
  {
    std::lock_guard lock(mu_);
    open_connections_.erase(id);
    cv_.notify_all();
    auto it = node_of_conn_.find(id);
    if (it != node_of_conn_.end()) {
      if (!states_[static_cast<size_t>(it->second)].left) {
        DeclareLost(it->second, fmt::format("its connection closed ({})", reason), out);
      }
    } else {
      auto p = std::find_if(pending_.begin(), pending_.end(),
                            [&](const Pending& q) { return q.conn == id; });
      if (p != pending_.end()) {
        log_.Warn(
            "scheduler: {} at {}:{} disconnected before the job formed ({}); waiting for "
            "a replacement",
            RoleName(p->request.role), p->request.host, p->request.port, reason);
        pending_.erase(p);
      }
      auto j = std::find_if(joiners_.begin(), joiners_.end(),
                            [&](const Joiner& q) { return q.conn == id; });
      if (j != joiners_.end()) {
        log_.Warn("scheduler: worker at {}:{} left before it was admitted ({})", j->request.host,
                  j->request.port, reason);
        joiners_.erase(j);
        AnnounceJoiners(out);
      }
    }
  }
  Flush(out);
}

std::string Scheduler::MissingFromStart() const {
  std::vector<std::string> parts;
  for (Role role : {Role::kScheduler, Role::kServer, Role::kWorker}) {
    int expected = ExpectedOf(role, options_.num_servers, options_.num_workers);
    int have =
        static_cast<int>(std::count_if(pending_.begin(), pending_.end(),
                                       [&](const Pending& p) { return p.request.role == role; }));
    if (have < expected) {
      parts.push_back(fmt::format("{} of {} {}(s)", expected - have, expected, RoleName(role)));
    }
  }
  std::string registered;
  for (const auto& p : pending_) {
    registered += fmt::format("{}{} at {}:{}", registered.empty() ? "" : ", ",
                              RoleName(p.request.role), p.request.host, p.request.port);
  }
  return fmt::format("still missing {}; registered: {}", fmt::join(parts, ", "),
                     registered.empty() ? "none" : registered);
}

void Scheduler::WatchdogLoop() {
  auto tick = std::min(milliseconds(200), options_.heartbeat_timeout / 4);
  std::unique_lock lock(mu_);
  while (!stopping_) {
    // Every wake looks, whatever woke it: the checks below depend on the
    // clock's time alone. On a manual clock the sleep is short (base/clock.h).
    cv_.wait_for(lock, clock_.SleepBound(clock_.Now() + tick));
    if (stopping_) break;
    Outbox out;
    auto now = clock_.Now();
    if (!table_ && !failure_ && now - start_ > options_.start_timeout) {
      std::string text =
          fmt::format("not every node registered within TANDEM_START_TIMEOUT={:.0f} s: {}",
                      Seconds(options_.start_timeout), MissingFromStart());
      for (const auto& p : pending_) {
        out.sends.emplace_back(
            p.conn, MakeMessage(msg::kStartTimedOut, -1, EncodeText(text), 0, net::flags::kError));
      }
      FailJob(text, out);
    }
    if (!table_ && !failure_ && start_report_.TakeDue()) {
      log_.Warn(
          "scheduler: still waiting for every node to register {}: {} (gives up after {:.0f} "
          "s, TANDEM_START_TIMEOUT)",
          start_report_.Lasted(), MissingFromStart(), Seconds(options_.start_timeout));
    }
    if (table_ && !failure_) {
      bool dropped = false;
      for (auto it = joiners_.begin(); it != joiners_.end();) {
        if (now - it->since <= options_.start_timeout) {
          ++it;
          continue;
        }
        std::string text = fmt::format(
            "worker at {}:{} was not admitted into the running job within "
            "TANDEM_START_TIMEOUT={:.0f} s: {}",
            it->request.host, it->request.port, Seconds(options_.start_timeout),
            PlaceJoiners()[static_cast<size_t>(it - joiners_.begin())] >= 0
                ? "a place was free, but the workers did not regroup (the elastic loop's "
                  "commits admit new workers)"
                : "no worker left the job to free a place");
        log_.Warn("scheduler: {}", text);
        out.sends.emplace_back(it->conn, MakeMessage(msg::kStartTimedOut, -1, EncodeText(text), 0,
                                                     net::flags::kError));
        it = joiners_.erase(it);
        dropped = true;
      }
      if (dropped) AnnounceJoiners(out);
      if (below_minimum_since_ && now - *below_minimum_since_ > options_.elastic_timeout &&
          left_count_ + departed_count_ < static_cast<int>(table_->nodes.size())) {
        FailBelowMinimum(out);
      }
      for (size_t id = 0; id < states_.size(); ++id) {
        auto silent = duration_cast<milliseconds>(now - states_[id].last_seen);
        if (!states_[id].left && silent > options_.heartbeat_timeout) {
          DeclareLost(static_cast<int>(id),
                      fmt::format("no heartbeat for {:.1f} s (PS_HEARTBEAT_TIMEOUT={:.1f} s)",
                                  Seconds(silent), Seconds(options_.heartbeat_timeout)),
                      out);
        }
      }
      for (auto it = barriers_.begin(); it != barriers_.end() && !failure_;) {
        BarrierState& b = it->second;
        if (b.final || now - b.started <= options_.barrier_timeout) {
          ++it;
          continue;
        }
        std::vector<std::string> missing;
        for (int id : MembersOf(it->first)) {
          if (!b.arrived.contains(id)) missing.push_back(table_->nodes[id].ToString());
        }
        std::string text = fmt::format(
            "barrier #{} over {} timed out after {:.0f} s (TANDEM_BARRIER_TIMEOUT) waiting for: {}",
            b.sequence, GroupsName(it->first), Seconds(options_.barrier_timeout),
            fmt::join(missing, ", "));
        log_.Error("scheduler: {}", text);
        FinishBarrier(b, msg::kBarrierFailed, /*timed_out=*/true, text, out);
        it = barriers_.erase(it);
      }
    }
    if (!out.sends.empty() || !out.closes.empty()) {
      lock.unlock();
      Flush(out);
      lock.lock();
    }
  }
}

bool Scheduler::WaitUntilAllLeft(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] {
    return failure_.has_value() ||
           (table_ && left_count_ + departed_count_ == static_cast<int>(table_->nodes.size()));
  });
  return !failure_ && table_ &&
         left_count_ + departed_count_ == static_cast<int>(table_->nodes.size());
}

uint32_t Scheduler::epoch() const {
  std::lock_guard lock(mu_);
  return epoch_;
}

size_t Scheduler::Registered() const {
  std::lock_guard lock(mu_);
  return table_ ? table_->nodes.size() : pending_.size();
}

size_t Scheduler::Joiners() const {
  std::lock_guard lock(mu_);
  return joiners_.size();
}

bool Scheduler::BelowMinimum() const {
  std::lock_guard lock(mu_);
  return below_minimum_since_.has_value();
}

size_t Scheduler::AtBarrier(int groups) const {
  std::lock_guard lock(mu_);
  auto it = barriers_.find(groups);
  return it == barriers_.end() ? 0 : it->second.arrived.size();
}

std::optional<std::string> Scheduler::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

void Scheduler::DrainConnections(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return open_connections_.empty(); });
}

std::vector<std::pair<int, std::chrono::milliseconds>> Scheduler::Silences() const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<int, std::chrono::milliseconds>> out;
  if (!table_) return out;
  const auto now = clock_.Now();
  for (size_t id = 1; id < states_.size(); ++id) {
    if (states_[id].left) continue;
    out.emplace_back(static_cast<int>(id), std::chrono::duration_cast<std::chrono::milliseconds>(
                                               now - states_[id].last_seen));
  }
  return out;
}

}  // namespace tandem::cluster
