#include "collective/collective_service.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <set>

#include "collective/collective_messages.h"
#include "tandem/error.h"

namespace tandem::collective {
namespace {

// A communicator id every member computes alike without a message: FNV-1a
// over `values`' bytes (little end first); never 0, the first world's.
uint32_t CommunicatorId(const std::vector<uint32_t>& values) {
  uint32_t id = 2166136261u;
  for (uint32_t v : values) {
    for (int i = 0; i < 4; ++i) {
      id ^= (v >> (8 * i)) & 0xFF;
      id *= 16777619u;
    }
  }
  return id == 0 ? 1 : id;
}

}  // namespace

CollectiveSettings CollectiveSettings::FromEnvironment(const base::Environment& env,
                                                       const base::Config& config) {
  CollectiveSettings s;
  s.mesh.connections_per_peer =
      static_cast<int>(env.GetInt("TANDEM_COLLECTIVE_CONNECTIONS", 1, 1, 16));
  s.mesh.connect_timeout = config.connect_timeout;
  s.mesh.wait_report_interval = config.wait_report_interval;
  const std::string copy = env.GetString("TANDEM_COLLECTIVE_SAME_HOST_COPY", "1");
  if (copy != "0" && copy != "1" && copy != "host") {
    throw ConfigError(fmt::format(
        "TANDEM_COLLECTIVE_SAME_HOST_COPY='{}' is not one of 1 (every peer whose memory this "
        "process can read), host (only those that announced this worker's host address) or 0",
        copy));
  }
  s.mesh.same_host_copy = copy != "0";
  s.mesh.copy_same_address_only = copy == "host";
  s.mesh.mailbox = env.GetInt("TANDEM_COLLECTIVE_MAILBOX", 1, 0, 1) == 1;
  s.mesh.read_while_waiting = env.GetInt("TANDEM_COLLECTIVE_READ_WHILE_WAITING", 1, 0, 1) == 1;
  if (env.Get("TANDEM_COLLECTIVE_SPIN_US")) {
    s.mesh.spin = std::chrono::microseconds(env.GetInt("TANDEM_COLLECTIVE_SPIN_US", 0, 0, 1000000));
  }
  s.communicator.timeout = env.GetSeconds("TANDEM_COLLECTIVE_TIMEOUT", std::chrono::seconds(300));
  if (s.communicator.timeout.count() <= 0) {
    throw ConfigError("TANDEM_COLLECTIVE_TIMEOUT must be positive");
  }
  s.communicator.segment_by_placement = !env.Get("TANDEM_COLLECTIVE_SEGMENT_BYTES").has_value();
  s.communicator.segment_bytes = static_cast<size_t>(
      env.GetInt("TANDEM_COLLECTIVE_SEGMENT_BYTES", CommunicatorSettings::kOneHostSegmentBytes,
                 4096, int64_t{1} << 30));
  s.communicator.table = AlgorithmTable::FromEnvironment(env);
  // Elastic jobs: whether the mesh waits for the scheduler's verdict on a
  // lost link (the scheduler checks the value itself: cluster/node.cc).
  s.mesh.min_workers = static_cast<int>(env.GetInt("TANDEM_MIN_WORKERS", 0, 0, 1 << 20));
  s.mesh.verdict_wait = config.heartbeat_timeout + std::chrono::seconds(5);
  return s;
}

CollectiveService::CollectiveService(const cluster::NodeServices& services,
                                     CollectiveSettings settings)
    : membership_(services.membership),
      log_(services.log),
      settings_(std::move(settings)),
      ops_(services.stats, "tandem_collective_duration_seconds",
           "Seconds a collective operation took on this worker, call to return, by operation.",
           services.timeline),
      queued_(services.stats.GetGauge(
          "tandem_collective_queued_operations",
          "Collective operations submitted and waiting for their communicator's thread.")),
      mesh_(settings_.mesh, services.transport, services.log, services.traffic) {
  services.dispatcher.Register(msg::kHello, msg::kLast, &mesh_);
  PeerMesh* mesh = &mesh_;
  // A stopped job fails the collectives with the stopping process's kind
  // (a server's IoError, say), a lost node with PeerLost.
  membership_.AddFailureListener([mesh](const std::string& text, const std::exception_ptr& error) {
    mesh->Fail(FailureKindOf(error), text);
  });
  // A worker that leaves an elastic job retires every communicator made
  // before (docs/elastic.md, "Elastic collectives").
  membership_.AddWorkerLeftListener([mesh](const cluster::WorkerLeftNotice& notice) {
    mesh->ChangeMembership(notice.epoch, notice.node.rank,
                           fmt::format("{} left the job: {} (membership epoch {})",
                                       notice.node.ToString(), notice.reason, notice.epoch));
  });
  // So does one that joins; the mesh takes its links from then on.
  membership_.AddWorkerJoinedListener([mesh](const cluster::WorkerJoinedNotice& notice) {
    mesh->ExpectJoin(notice.epoch, notice.node,
                     fmt::format("{} joined the job (membership epoch {})", notice.node.ToString(),
                                 notice.epoch));
  });
}

namespace {

// The world's id after a change: every member computes it alike from the
// epoch and the members, apart from the groups' ids (NewGroup) by a marker.
uint32_t WorldId(uint32_t epoch, const std::vector<int>& workers) {
  std::vector<uint32_t> key = {0x57E1A5u, epoch};
  for (int r : workers) key.push_back(static_cast<uint32_t>(r));
  return CommunicatorId(key);
}

}  // namespace

CollectiveService::~CollectiveService() { StopWorld(); }

void CollectiveService::Start() {
  const NodeInfo& self = membership_.self();
  if (self.role != Role::kWorker) {
    throw ConfigError(
        fmt::format("collectives run among workers; this process is {}", self.ToString()));
  }
  if (membership_.joined_running_job()) {
    // Admitted into a running elastic job: links to the members, and the
    // world the members made when they admitted this worker (Regroup).
    const Members members{membership_.epoch(), membership_.workers()};
    mesh_.ConnectJoining(membership_.table(), self.rank, self.id, membership_.admission_epoch(),
                         members.workers);
    // This worker last, as the members' Regroup orders it, with those
    // admitted before it since the job went below its minimum (which hold
    // no state either).
    std::vector<int> newcomers = membership_.joined_below_minimum();
    newcomers.push_back(self.rank);
    uint32_t joined_from;
    int size;
    {
      std::lock_guard lock(world_mu_);
      world_ = MakeWorld(members, newcomers);
      world_epoch_ = joined_from = members.epoch;
      size = world_->size();
      log_.Info(
          "collectives joined the running job over workers [{}] (membership epoch {}): this "
          "worker is rank {} of {}",
          fmt::join(world_->members(), ", "), members.epoch, world_->rank(), world_->size());
    }
    // Below the minimum the members regroup again until it is back
    // (Regroup); this worker takes part in those regroups before the
    // elastic loop's first Sync, still counted among the newcomers.
    if (size < settings_.mesh.min_workers) RegroupFrom(joined_from, newcomers);
    return;
  }
  mesh_.Connect(membership_.table(), self.rank, self.id);
  std::vector<int> all;
  for (int r = 0; r < mesh_.size(); ++r) all.push_back(r);
  CommunicatorSettings settings = SettingsFor(all);
  settings.epoch = membership_.epoch();
  std::lock_guard lock(world_mu_);
  world_epoch_ = settings.epoch;
  world_.reset(new Communicator(
      std::make_unique<CommunicatorImpl>(mesh_, 0, all, std::move(settings), log_, ops_, queued_)));
}

Members CollectiveService::Regroup() {
  uint32_t from;
  {
    std::lock_guard lock(world_mu_);
    from = world_epoch_;
  }
  return RegroupFrom(from, {});
}

Members CollectiveService::RegroupFrom(uint32_t joined_after, const std::vector<int>& newcomers) {
  while (true) {
    const Members members = RegroupOnce(joined_after, newcomers);
    if (!mesh_.elastic() ||
        static_cast<int>(members.workers.size()) >= settings_.mesh.min_workers) {
      return members;
    }
    // Below the minimum the scheduler holds the workers' regroup until a
    // worker joins (TANDEM_ELASTIC_TIMEOUT): one is admitted per regroup,
    // so regroup until the minimum is back.
    log_.Info(
        "collectives: {} worker(s) after the regroup (membership epoch {}), below the minimum of "
        "{}: regrouping again, which waits for a worker to join (up to TANDEM_ELASTIC_TIMEOUT)",
        members.workers.size(), members.epoch, settings_.mesh.min_workers);
  }
}

Members CollectiveService::RegroupOnce(uint32_t joined_after, const std::vector<int>& newcomers) {
  // The barrier runs on a thread of its own while this one waits on the
  // mesh, which drains this process's mailbox: a piece a peer sent by
  // reference before it heard of the change is answered meanwhile. The
  // peer's abandoned operation waits for that answer before it ends and
  // the peer reaches this barrier.
  std::atomic<bool> passed{false};
  std::future<Members> barrier = std::async(std::launch::async, [this, &passed] {
    struct Signal {
      std::atomic<bool>& passed;
      PeerMesh& mesh;
      ~Signal() {
        passed.store(true);
        mesh.Wake();
      }
    } signal{passed, mesh_};
    return membership_.Barrier(group::kWorkers, /*final=*/false, /*admit=*/true);
  });
  while (!mesh_.WaitUntil([&] { return passed.load(); },
                          std::chrono::steady_clock::now() + std::chrono::seconds(1))) {
  }
  const Members members = barrier.get();
  std::lock_guard lock(world_mu_);
  if (!world_) throw InvalidArgument("the collectives have not started (Start not called)");
  if (members.epoch == world_epoch_) return members;  // no change since the world was made
  // A worker admitted at this barrier connects now; the new world's first
  // operation waits for nothing but its pieces.
  mesh_.WaitJoined(std::chrono::steady_clock::now() + settings_.mesh.connect_timeout);
  std::vector<int> joined = mesh_.JoinedSince(joined_after);
  joined.insert(joined.end(), newcomers.begin(), newcomers.end());
  std::unique_ptr<Communicator> world = MakeWorld(members, joined);
  retired_worlds_.push_back(std::move(world_));
  world_ = std::move(world);
  world_epoch_ = members.epoch;
  log_.Info(
      "collectives regrouped over workers [{}] (membership epoch {}): this worker is rank {} "
      "of {}",
      fmt::join(world_->members(), ", "), members.epoch, world_->rank(), world_->size());
  return members;
}

std::unique_ptr<Communicator> CollectiveService::MakeWorld(const Members& members,
                                                           const std::vector<int>& joined) {
  // Workers that joined since the last world come last, so that rank 0,
  // whose state Sync hands out, is one that trained with the others.
  std::vector<int> order;
  for (bool newcomers : {false, true}) {
    for (int r : members.workers) {
      const bool joined_now = std::find(joined.begin(), joined.end(), r) != joined.end();
      if (joined_now == newcomers) order.push_back(r);
    }
  }
  CommunicatorSettings settings = SettingsFor(order);
  settings.epoch = members.epoch;
  const uint32_t id = WorldId(members.epoch, order);
  return std::unique_ptr<Communicator>(new Communicator(std::make_unique<CommunicatorImpl>(
      mesh_, id, order, std::move(settings), log_, ops_, queued_)));
}

void CollectiveService::CheckJoins() {
  if (!mesh_.elastic()) return;
  Communicator& world = World();
  int64_t waiting = world.rank() == 0 ? membership_.joiners_waiting() : 0;
  world.Broadcast(TensorView{&waiting, DType::kI64, {1}}, 0, {"elastic join check"});
  if (waiting > 0) {
    throw MembershipChanged(fmt::format(
        "{} worker(s) wait to join the job (membership epoch {}): the workers regroup to admit "
        "them",
        waiting, mesh_.epoch()));
  }
}

CommunicatorSettings CollectiveService::SettingsFor(const std::vector<int>& world_ranks) const {
  CommunicatorSettings s = settings_.communicator;
  // Every member sees the same node table and the same copy offers, so
  // every member decides alike.
  bool one_host = true;
  bool all_offer = true;
  for (int r : world_ranks) {
    one_host = one_host && mesh_.Host(r) == mesh_.Host(world_ranks[0]);
    all_offer = all_offer && mesh_.OffersCopy(r);
  }
  s.path = one_host && all_offer ? AlgorithmTable::Path::kSameHostCopy : AlgorithmTable::Path::kTcp;
  std::vector<std::string> hosts;
  hosts.reserve(world_ranks.size());
  for (int r : world_ranks) hosts.push_back(mesh_.Host(r));
  s.layout = HostLayout::Of(hosts);
  if (s.segment_by_placement) {
    s.segment_bytes = one_host ? CommunicatorSettings::kOneHostSegmentBytes
                               : CommunicatorSettings::kNetworkSegmentBytes;
  }
  log_.V1(
      "communicator of {} worker(s) {}: the selection table's {} rows, {} KiB segments, {} "
      "host(s) with {} rank(s) each",
      world_ranks.size(), one_host ? "on one host" : "across hosts",
      s.path == AlgorithmTable::Path::kSameHostCopy ? "same-host-copy" : "TCP",
      s.segment_bytes >> 10, s.layout.hosts.size(),
      s.layout.PerHost() > 0 ? std::to_string(s.layout.PerHost()) : "different numbers of");
  return s;
}

Communicator& CollectiveService::World() {
  std::lock_guard lock(world_mu_);
  if (!world_) throw InvalidArgument("the collectives have not started (Start not called)");
  return *world_;
}

void CollectiveService::StopWorld() {
  std::unique_ptr<Communicator> world;
  std::vector<std::unique_ptr<Communicator>> retired;
  {
    std::lock_guard lock(world_mu_);
    world = std::move(world_);
    retired = std::move(retired_worlds_);
  }
  // Destroyed outside the lock: each waits for its queued operations.
  world.reset();
  retired.clear();
}

std::unique_ptr<Communicator> CollectiveService::NewGroup(const std::vector<int>& world_ranks) {
  std::set<int> seen;
  for (int r : world_ranks) {
    if (r < 0 || r >= mesh_.size() || !seen.insert(r).second) {
      throw InvalidArgument(fmt::format("group [{}]: worker rank {} is outside 0..{} or repeated",
                                        fmt::join(world_ranks, ", "), r, mesh_.size() - 1));
    }
  }
  for (int r : world_ranks) {
    if (mesh_.Departed(r)) {
      throw InvalidArgument(
          fmt::format("group [{}]: worker {} left the job (membership epoch {}; docs/elastic.md)",
                      fmt::join(world_ranks, ", "), r, mesh_.epoch()));
    }
  }
  if (!seen.count(mesh_.rank())) {
    throw InvalidArgument(fmt::format("group [{}] does not contain this worker (rank {})",
                                      fmt::join(world_ranks, ", "), mesh_.rank()));
  }
  // The id: the member list and how many groups of that list this process
  // made.
  std::vector<uint32_t> key(world_ranks.begin(), world_ranks.end());
  {
    std::lock_guard lock(groups_mu_);
    key.push_back(groups_made_[world_ranks]++);
  }
  const uint32_t id = CommunicatorId(key);
  CommunicatorSettings settings = SettingsFor(world_ranks);
  settings.epoch = mesh_.epoch();
  return std::unique_ptr<Communicator>(new Communicator(std::make_unique<CommunicatorImpl>(
      mesh_, id, world_ranks, std::move(settings), log_, ops_, queued_)));
}

}  // namespace tandem::collective
