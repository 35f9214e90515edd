#include "cluster/membership.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

#include "tandem/error.h"

namespace tandem::cluster {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

double Seconds(milliseconds d) { return static_cast<double>(d.count()) / 1000.0; }

std::string Hostname() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

Membership::Membership(Options options, net::Transport& transport, base::Logger& log,
                       const base::Clock& clock)
    : options_(std::move(options)), transport_(transport), log_(log), clock_(clock) {}

Membership::~Membership() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    leaving_ = true;
  }
  cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  Close();
}

void Membership::Send(uint16_t type, std::string meta, uint64_t request_id) {
  net::OutgoingMessage m;
  m.header.type = type;
  m.header.sender = self_id_;
  m.header.recipient = 0;
  m.header.request_id = request_id;
  m.meta = std::move(meta);
  transport_.Send(conn_, std::move(m));
}

void Membership::Join() {
  log_.V1("connecting to the scheduler at {}", options_.scheduler.ToString());
  conn_ = transport_.Connect(options_.scheduler, options_.connect_timeout);
  {
    std::lock_guard lock(mu_);
    connected_ = true;
    last_heard_ = clock_.Now();
  }
  RegisterRequest req;
  req.role = options_.role;
  req.requested_rank = options_.requested_rank;
  req.host = options_.host;
  req.port = options_.port;
  req.pid = static_cast<uint32_t>(getpid());
  req.hostname = Hostname();
  Send(msg::kRegister, req.Encode());
  log_.V1("registered with the scheduler as {} at {}:{}", RoleName(options_.role), options_.host,
          options_.port);

  // The scheduler's own start timeout fires first and says who is missing;
  // ours is the backstop for a scheduler that went silent.
  auto limit = options_.start_timeout + options_.heartbeat_timeout;
  base::WaitReport report(clock_, options_.wait_report_interval);
  std::unique_lock lock(mu_);
  auto arrived = [&] { return table_.has_value() || failure_.has_value(); };
  while (!base::WaitUntil(cv_, lock, clock_,
                          clock_.Now() + std::min(report.NextIn(), limit - report.Waited()),
                          arrived) &&
         report.Waited() < limit) {
    if (report.TakeDue()) {
      if (queued_) {
        log_.Warn("still {} {}", *queued_, report.Lasted());
      } else {
        log_.Warn(
            "still waiting for the node table from the scheduler at {} {}: it comes once every "
            "node of the job registered (gives up after {:.0f} s, TANDEM_START_TIMEOUT)",
            options_.scheduler.ToString(), report.Lasted(), Seconds(limit));
      }
    }
  }
  if (failure_) ThrowFailure();
  if (!table_) {
    throw Timeout(fmt::format(
        "no node table from the scheduler at {} within {:.0f} s (TANDEM_START_TIMEOUT plus "
        "PS_HEARTBEAT_TIMEOUT)",
        options_.scheduler.ToString(), Seconds(limit)));
  }
  const auto admitted = std::move(admitted_barriers_);
  lock.unlock();
  if (joined_running_job()) {
    std::lock_guard serial(barrier_mu_);
    for (const auto& [groups, passed] : admitted) barrier_sequence_[groups] = passed;
  }
  log_.SetTag(self().role == Role::kScheduler
                  ? std::string("scheduler")
                  : fmt::format("{} {}", RoleName(self().role), self().rank));
  if (joined_running_job()) {
    log_.Info(
        "joined the running job: {}, in a departed worker's place; {} workers (membership "
        "epoch {})",
        self().ToString(), num_workers(), epoch());
  } else {
    log_.V1("joined: {} of a job with {} servers and {} workers", self().ToString(),
            table_->num_servers, table_->num_workers);
  }
  // The first beat's time is taken here, not on the new thread, so that it
  // is fixed once Join returns (a test on a manual clock relies on that).
  heartbeat_ = std::thread(
      [this, first = clock_.Now() + options_.heartbeat_interval] { HeartbeatLoop(first); });
}

void Membership::OnMessage(net::ConnectionId id, net::Message&& msg) {
  if (id != conn_) return;
  std::unique_lock lock(mu_);
  last_heard_ = clock_.Now();
  try {
    switch (msg.header.type) {
      case msg::kNodeTable: {
        if (table_) throw ProtocolError("a second node table");
        NodeTable t = NodeTable::Decode(msg.meta);
        int me = msg.header.recipient;
        if (me < 0 || me >= static_cast<int>(t.nodes.size())) {
          throw ProtocolError(
              fmt::format("node table addressed to node {} of {}", me, t.nodes.size()));
        }
        const NodeInfo& n = t.nodes[static_cast<size_t>(me)];
        if (n.role != options_.role || n.host != options_.host || n.port != options_.port) {
          throw ProtocolError(fmt::format("node table entry {} is {}, but this node is {} at {}:{}",
                                          me, n.ToString(), RoleName(options_.role), options_.host,
                                          options_.port));
        }
        self_id_ = me;
        table_ = std::move(t);
        for (const auto& node : table_->nodes) {
          if (node.role == Role::kWorker) workers_.push_back(node.rank);
        }
        break;
      }
      case msg::kAdmitted: {
        if (table_) throw ProtocolError("an admission after the node table");
        Admission a = Admission::Decode(msg.meta);
        int me = msg.header.recipient;
        if (me < 0 || me >= static_cast<int>(a.table.nodes.size())) {
          throw ProtocolError(
              fmt::format("admission addressed to node {} of {}", me, a.table.nodes.size()));
        }
        const NodeInfo& n = a.table.nodes[static_cast<size_t>(me)];
        if (n.role != Role::kWorker || options_.role != Role::kWorker || n.host != options_.host ||
            n.port != options_.port ||
            !std::binary_search(a.workers.begin(), a.workers.end(), n.rank)) {
          throw ProtocolError(fmt::format(
              "admission as {} (members {}), but this node is {} at {}:{}", n.ToString(),
              fmt::join(a.workers, ","), RoleName(options_.role), options_.host, options_.port));
        }
        self_id_ = me;
        epoch_ = a.epoch;
        workers_.assign(a.workers.begin(), a.workers.end());
        admitted_barriers_ = std::move(a.barriers);
        admission_epoch_ = a.epoch;
        joined_below_minimum_.assign(a.joined_below_minimum.begin(), a.joined_below_minimum.end());
        table_ = std::move(a.table);
        break;
      }
      case msg::kJoinQueued:
        queued_ = DecodeText(msg.meta, "join queue notice");
        log_.Info("{}", *queued_);
        break;
      case msg::kJoinPending:
        joiners_waiting_ = JoinPendingNotice::Decode(msg.meta).waiting;
        log_.V1("{} worker(s) wait to join at the next regroup", joiners_waiting_);
        break;
      case msg::kWorkerJoined: {
        WorkerJoinedNotice notice = WorkerJoinedNotice::Decode(msg.meta);
        if (!table_) throw ProtocolError("a worker-joined notice before the node table");
        if (notice.epoch != epoch_ + 1) {
          throw ProtocolError(fmt::format(
              "worker-joined notice of membership epoch {}, but this node is at epoch {}",
              notice.epoch, epoch_));
        }
        std::vector<int> expected = workers_;
        expected.insert(std::lower_bound(expected.begin(), expected.end(), notice.node.rank),
                        notice.node.rank);
        const bool known_slot =
            notice.node.id >= 0 && notice.node.id < static_cast<int>(table_->nodes.size()) &&
            table_->nodes[static_cast<size_t>(notice.node.id)].role == Role::kWorker &&
            table_->nodes[static_cast<size_t>(notice.node.id)].rank == notice.node.rank;
        if (!known_slot || std::binary_search(workers_.begin(), workers_.end(), notice.node.rank) ||
            !std::equal(expected.begin(), expected.end(), notice.workers.begin(),
                        notice.workers.end())) {
          throw ProtocolError(fmt::format(
              "worker-joined notice of epoch {} names {} joining and workers {} as members, but "
              "the members were workers {}",
              notice.epoch, notice.node.ToString(), fmt::join(notice.workers, ","),
              fmt::join(workers_, ",")));
        }
        epoch_ = notice.epoch;
        workers_ = std::move(expected);
        joined_[notice.node.rank] = notice.node;
        log_.Warn(
            "{} joined the job in a departed worker's place; {} workers (membership epoch {})",
            notice.node.ToString(), workers_.size(), epoch_);
        for (const auto& listener : worker_joined_listeners_) listener(notice);
        break;
      }
      case msg::kRejected:
        Fail(FailureKind::kRejected, fmt::format("the scheduler rejected this node: {}",
                                                 DecodeText(msg.meta, "rejection")));
        break;
      case msg::kStartTimedOut:
        Fail(FailureKind::kTimeout, DecodeText(msg.meta, "start failure"));
        break;
      case msg::kBarrierDone:
      case msg::kBarrierFailed: {
        auto it = barrier_waits_.find(msg.header.request_id);
        if (it == barrier_waits_.end()) {
          throw ProtocolError(
              fmt::format("barrier answer for unknown request {}", msg.header.request_id));
        }
        it->second.done = true;
        // Notices of changes the scheduler sent before the release were
        // handled before it (one connection, in order): the same members on
        // every node that passed this barrier.
        it->second.members = Members{epoch_, workers_};
        if (msg.header.type == msg::kBarrierFailed) {
          BarrierFailure f = BarrierFailure::Decode(msg.meta);
          it->second.error = f.text;
          it->second.timed_out = f.timed_out;
        }
        break;
      }
      case msg::kHeartbeatAck:
        break;
      case msg::kJobStopped: {
        JobStoppedNotice notice = JobStoppedNotice::Decode(msg.meta);
        Fail(FailureKind::kStopped,
             fmt::format("{} stopped the job: {}", notice.node.ToString(), notice.reason),
             notice.kind);
        break;
      }
      case msg::kWorkerLeft: {
        WorkerLeftNotice notice = WorkerLeftNotice::Decode(msg.meta);
        if (!table_) throw ProtocolError("a worker-left notice before the node table");
        if (notice.epoch != epoch_ + 1) {
          throw ProtocolError(
              fmt::format("worker-left notice of membership epoch {}, but this node is at epoch {}",
                          notice.epoch, epoch_));
        }
        std::vector<int> expected;
        for (int rank : workers_) {
          if (rank != notice.node.rank) expected.push_back(rank);
        }
        if (expected.size() == workers_.size() ||
            !std::equal(expected.begin(), expected.end(), notice.remaining.begin(),
                        notice.remaining.end())) {
          throw ProtocolError(fmt::format(
              "worker-left notice of epoch {} names {} leaving and workers {} remaining, but the "
              "members were workers {}",
              notice.epoch, notice.node.ToString(), fmt::join(notice.remaining, ","),
              fmt::join(workers_, ",")));
        }
        if (self().role == Role::kWorker && notice.node.rank == self().rank) {
          // This worker was declared gone (silent past the heartbeat
          // timeout, or cut off): the job went on without it.
          Fail(FailureKind::kPeerLost,
               fmt::format("this worker was removed from the elastic job: {}", notice.reason));
          break;
        }
        epoch_ = notice.epoch;
        workers_ = std::move(expected);
        // Not "go on": below the minimum the members wait for joiners.
        log_.Warn("{} left the job: {}; {} worker{} remain{} (membership epoch {})",
                  notice.node.ToString(), notice.reason, workers_.size(),
                  workers_.size() == 1 ? "" : "s", workers_.size() == 1 ? "s" : "", epoch_);
        for (const auto& listener : worker_left_listeners_) listener(notice);
        break;
      }
      case msg::kNodeLost: {
        NodeLostNotice notice = NodeLostNotice::Decode(msg.meta);
        Fail(FailureKind::kPeerLost,
             fmt::format("lost {}: {}", notice.node.ToString(), notice.reason));
        break;
      }
      default:
        throw ProtocolError(fmt::format("unexpected message type {}", msg.header.type));
    }
  } catch (const ProtocolError& e) {
    Fail(FailureKind::kPeerLost, fmt::format("the scheduler at {} broke the protocol: {}",
                                             options_.scheduler.ToString(), e.what()));
  }
  lock.unlock();
  cv_.notify_all();
}

void Membership::OnDisconnected(net::ConnectionId id, const std::string& reason) {
  if (id != conn_) return;
  {
    std::lock_guard lock(mu_);
    connected_ = false;
    if (!leaving_) {
      Fail(FailureKind::kPeerLost,
           fmt::format("lost the scheduler ({}): {}", options_.scheduler.ToString(), reason));
    }
  }
  cv_.notify_all();
}

void Membership::Fail(FailureKind kind, std::string text, StopKind stop_kind) {
  if (failure_) return;
  // One line per process: the scheduler's node learns the failure from its
  // own scheduler service, which said it already ("scheduler: job failed").
  if (options_.role == Role::kScheduler) {
    log_.V1("{}", text);
  } else {
    log_.Error("{}", text);
  }
  failure_.emplace(kind, std::move(text));
  stop_kind_ = stop_kind;
  cv_.notify_all();  // AwaitFailure
  if (failure_listeners_.empty()) return;
  const std::exception_ptr error = FailureError();
  for (const auto& listener : failure_listeners_) listener(failure_->second, error);
}

void Membership::AddFailureListener(FailureListener listener) {
  std::lock_guard lock(mu_);
  if (failure_) listener(failure_->second, FailureError());
  failure_listeners_.push_back(std::move(listener));
}

void Membership::AddWorkerLeftListener(WorkerLeftListener listener) {
  std::lock_guard lock(mu_);
  worker_left_listeners_.push_back(std::move(listener));
}

void Membership::AddWorkerJoinedListener(WorkerJoinedListener listener) {
  std::lock_guard lock(mu_);
  worker_joined_listeners_.push_back(std::move(listener));
}

uint32_t Membership::joiners_waiting() const {
  std::lock_guard lock(mu_);
  return joiners_waiting_;
}

NodeInfo Membership::worker(int rank) const {
  std::lock_guard lock(mu_);
  if (auto it = joined_.find(rank); it != joined_.end()) return it->second;
  for (const auto& n : table_->nodes) {
    if (n.role == Role::kWorker && n.rank == rank) return n;
  }
  throw InvalidArgument(
      fmt::format("no worker rank {} in a job of {} workers", rank, table_->num_workers));
}

uint32_t Membership::epoch() const {
  std::lock_guard lock(mu_);
  return epoch_;
}

std::vector<int> Membership::workers() const {
  std::lock_guard lock(mu_);
  return workers_;
}

int Membership::num_workers() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(workers_.size());
}

void Membership::StopJob(const std::exception& cause) {
  JobStopRequest request{StopKindOf(cause), cause.what()};
  {
    std::lock_guard lock(mu_);
    if (failure_ || !connected_) return;
  }
  log_.Error("stopping the job: {}", request.reason);
  // The scheduler answers every node, this one too, with kJobStopped; this
  // node fails then, so that it does not exit (and close the connection)
  // before the request is on its way.
  try {
    Send(msg::kStopJob, request.Encode());
  } catch (const std::exception& e) {
    log_.Error("could not ask the scheduler to stop the job: {}", e.what());
  }
}

std::exception_ptr Membership::FailureError() const {
  try {
    ThrowFailure();
  } catch (...) {
    return std::current_exception();
  }
}

void Membership::ThrowFailure() const {
  const auto& [kind, text] = *failure_;
  switch (kind) {
    case FailureKind::kPeerLost:
      throw PeerLost(text);
    case FailureKind::kRejected:
      throw ConfigError(text);
    case FailureKind::kTimeout:
      throw Timeout(text);
    case FailureKind::kStopped:
      ThrowStopKind(stop_kind_, text);
  }
  throw Error(text);
}

std::exception_ptr Membership::AwaitFailure(std::chrono::milliseconds within) {
  std::unique_lock lock(mu_);
  // Bounded by `within`: the caller has an error of its own to report.
  cv_.wait_for(lock, within, [&] { return failure_.has_value(); });
  return failure_ ? FailureError() : nullptr;
}

void Membership::CheckHealth() const {
  std::lock_guard lock(mu_);
  if (failure_) ThrowFailure();
}

Members Membership::Barrier(int groups, bool final, bool admit) {
  if (groups <= 0 || (groups & ~group::kAll) != 0) {
    throw InvalidArgument(
        fmt::format("barrier group mask {} is not a combination of "
                    "group::kScheduler, kServers, kWorkers",
                    groups));
  }
  if (!table_) throw InvalidArgument("Barrier() before Join()");
  if (!InGroups(self(), groups)) {
    throw InvalidArgument(fmt::format("{} called a barrier over {}, a group it is not in",
                                      self().ToString(), GroupsName(groups)));
  }
  std::lock_guard serial(barrier_mu_);
  BarrierRequest req;
  req.groups = static_cast<uint8_t>(groups);
  req.flags = static_cast<uint8_t>((final ? BarrierRequest::kFinal : 0) |
                                   (admit ? BarrierRequest::kAdmit : 0));
  req.sequence = ++barrier_sequence_[groups];
  uint64_t request_id;
  {
    std::lock_guard lock(mu_);
    if (failure_) ThrowFailure();
    if (leaving_ || !connected_) {
      // No answer could come (Close() or Finalize() ran): say so, not wait.
      throw Error(fmt::format("barrier #{} over {}: {} has left the job", req.sequence,
                              GroupsName(groups), self().ToString()));
    }
    request_id = ++next_request_;
    barrier_waits_[request_id] = {};
  }
  auto started = clock_.Now();
  Send(msg::kBarrier, req.Encode(), request_id);
  std::unique_lock lock(mu_);
  auto ready = [&] { return barrier_waits_[request_id].done || failure_.has_value(); };
  // A final barrier lasts as long as the slowest node's work (heartbeats
  // bound it instead of a limit); for the others, the scheduler's barrier
  // timeout fires first and names the missing nodes, and this limit is the
  // backstop for a silent scheduler. Either way a wait that goes on says so
  // every report interval (TANDEM_WAIT_REPORT_SECONDS).
  const auto limit = options_.barrier_timeout + options_.heartbeat_timeout;
  base::WaitReport report(clock_, options_.wait_report_interval);
  while (!base::WaitUntil(
      cv_, lock, clock_,
      clock_.Now() + (final ? report.NextIn() : std::min(report.NextIn(), limit - report.Waited())),
      ready)) {
    if (!final && report.Waited() >= limit) {
      barrier_waits_.erase(request_id);
      throw Timeout(fmt::format(
          "barrier #{} over {}: no answer from the scheduler at {} within "
          "{:.0f} s",
          req.sequence, GroupsName(groups), options_.scheduler.ToString(), Seconds(limit)));
    }
    if (report.TakeDue()) {
      log_.Warn(
          "still in {}barrier #{} over {} {}: the scheduler releases it when every node of the "
          "group arrived{}",
          final ? "the final " : "", req.sequence, GroupsName(groups), report.Lasted(),
          final ? " (the others are still working)" : "");
    }
  }
  BarrierWait result = barrier_waits_[request_id];
  barrier_waits_.erase(request_id);
  if (result.error) {
    if (result.timed_out) throw Timeout(*result.error);
    throw Error(*result.error);
  }
  if (!result.done) ThrowFailure();
  log_.V1("barrier #{} over {} passed in {:.3f} s", req.sequence, GroupsName(groups),
          Seconds(duration_cast<milliseconds>(clock_.Now() - started)));
  return std::move(result.members);
}

void Membership::Finalize() {
  Barrier(group::kAll, /*final=*/true);
  {
    std::lock_guard lock(mu_);
    leaving_ = true;
  }
  Send(msg::kLeave, {});
  log_.V1("left the job");
}

void Membership::Close() {
  bool close;
  {
    std::lock_guard lock(mu_);
    leaving_ = true;
    close = connected_;
  }
  if (close) transport_.Close(conn_);
}

void Membership::HeartbeatLoop(base::SteadyTime next) {
  std::unique_lock lock(mu_);
  auto ending = [this] { return stopping_ || leaving_ || !connected_; };
  while (!stopping_) {
    // Other events notify cv_ too; only the interval's end sends a beat.
    if (base::WaitUntil(cv_, lock, clock_, next, ending)) break;
    next += options_.heartbeat_interval;
    auto silent = duration_cast<milliseconds>(clock_.Now() - last_heard_);
    if (silent > options_.heartbeat_timeout) {
      Fail(FailureKind::kPeerLost,
           fmt::format("lost the scheduler ({}): nothing heard for {:.1f} s "
                       "(PS_HEARTBEAT_TIMEOUT={:.1f} s)",
                       options_.scheduler.ToString(), Seconds(silent),
                       Seconds(options_.heartbeat_timeout)));
      cv_.notify_all();
      break;
    }
    lock.unlock();
    Send(msg::kHeartbeat, {});
    lock.lock();
  }
}

std::chrono::milliseconds Membership::SinceLastHeard() const {
  std::lock_guard lock(mu_);
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock_.Now() - last_heard_);
}

}  // namespace tandem::cluster
