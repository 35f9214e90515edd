// Membership of a tandem job: who the nodes are, their ranks, barriers, and
// the news that a node was lost.
//
// A process joins with Cluster::Join(), which reads its start-up contract
// from the environment (the DMLC_* variables that MXNet's launch.py,
// Kubeflow's MXJob and `tandem launch` set, or those of torchrun, srun,
// mpirun, Kubernetes and Volcano jobs: docs/contracts.md), registers with the
// scheduler and blocks until every expected node is there. docs/cluster.md
// describes the protocol.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

namespace api {
struct ClusterAccess;
}  // namespace api

/// The three kinds of process in a job.
enum class Role : uint8_t { kScheduler = 0, kServer = 1, kWorker = 2 };

/// "scheduler", "server" or "worker".
std::string_view RoleName(Role role);

/// Barrier groups; combine with `|` (e.g. kServers | kWorkers).
namespace group {
inline constexpr int kScheduler = 1;
inline constexpr int kServers = 2;
inline constexpr int kWorkers = 4;
inline constexpr int kAll = kScheduler | kServers | kWorkers;
}  // namespace group

/// The workers that are members of a job at one moment, and how many times
/// the membership had changed by then (docs/elastic.md).
struct Members {
  uint32_t epoch = 0;        ///< 0 until a worker leaves an elastic job
  std::vector<int> workers;  ///< their ranks, ascending
  bool operator==(const Members&) const = default;
};

/// One node of the job as the scheduler announced it.
struct NodeInfo {
  int id = -1;  ///< unique in the job: 0 is the scheduler, then servers, then workers
  Role role = Role::kWorker;
  int rank = -1;                 ///< 0..n-1 within the role
  std::string host;              ///< address other nodes reach it at
  uint16_t port = 0;             ///< its listening port
  std::string ToString() const;  ///< e.g. "worker 3 (node 6, 10.0.0.5:41234)"
};

/// A node's membership in a running job.
///
/// A process joins once: on a worker, KVStore::Create(type, cluster) and
/// Collectives::Open(cluster) then open the parameter server and the
/// collectives on this one node, with the same worker rank (docs/cluster.md,
/// "One node, both strategies"). Each of them holds the node too; the node
/// leaves the job when the last of its users (this handle, each store, the
/// collectives) has left.
///
/// Thread-safety: every method may be called from any thread; Barrier calls
/// are serialised (one barrier at a time per node).
class Cluster {
 public:
  /// Joins the job that this process's environment describes. The scheduler
  /// process also starts the scheduler service. Blocks until the scheduler
  /// has sent the node table. Throws ConfigError (unusable environment),
  /// Timeout (scheduler unreachable, or not every node arrived within
  /// TANDEM_START_TIMEOUT: the error says who was missing), AuthFailed.
  static std::unique_ptr<Cluster> Join();

  /// As Join(), with an explicit environment instead of the process's.
  static std::unique_ptr<Cluster> Join(const std::map<std::string, std::string>& env);

  /// Gives up this handle's hold on the node; the last user to go without
  /// Finalize() makes the node leave at once (no final barrier).
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  /// This node's role, rank within its role and node id.
  Role role() const;
  int rank() const;
  int id() const;
  /// The number of workers and servers in the job. In an elastic job
  /// (TANDEM_MIN_WORKERS, docs/elastic.md) num_workers() counts the workers
  /// that are members now: it falls when one leaves.
  int num_workers() const;
  int num_servers() const;
  /// The ranks of the workers that are members now, ascending: every rank
  /// 0..n-1 until a worker leaves an elastic job; the others keep their
  /// ranks.
  std::vector<int> workers() const;
  /// How many times the membership changed (0 until a worker leaves an
  /// elastic job).
  uint32_t epoch() const;
  /// Whether this worker was admitted into a job that was already running,
  /// in the place of a worker that left (docs/elastic.md, "Workers that
  /// join"): its state is the others' to give (its first world was made
  /// with them at a regroup), not its own.
  bool joined_running_job() const;
  /// Every node of the job, ordered by id.
  const std::vector<NodeInfo>& nodes() const;

  /// Blocks until every node of `groups` (a mask of group::k*; this node
  /// must belong to it) has called Barrier with the same mask. Throws
  /// InvalidArgument (bad mask), PeerLost (a node of the job was lost),
  /// Timeout (TANDEM_BARRIER_TIMEOUT passed; the error names the nodes the
  /// scheduler was still waiting for). Returns the members as this node
  /// knew them when the scheduler released the barrier: every notice of a
  /// change the scheduler sent before the release counted, none after, so
  /// every node that passes the same barrier gets the same answer (what an
  /// elastic program re-shards by; docs/elastic.md).
  Members Barrier(int groups);

  /// Throws PeerLost if a node of the job has been lost; returns otherwise.
  void CheckHealth() const;

  /// Adds to this process's timeline (TANDEM_TIMELINE, docs/metrics.md) a
  /// span `name` on the thread track `track`, from `start` to `end` of the
  /// steady clock (CLOCK_MONOTONIC, as Python's time.monotonic_ns): the
  /// program's own phases (a forward pass, a wait) beside tandem's
  /// operations. Does nothing without a timeline.
  void RecordSpan(const std::string& track, const std::string& name,
                  std::chrono::steady_clock::time_point start,
                  std::chrono::steady_clock::time_point end);

  /// Orderly exit: a barrier over all nodes, then leave. It waits as long
  /// as the slowest node takes to finish its work (a server waits for the
  /// workers' training to end) but never past a lost node: heartbeats watch
  /// every node meanwhile. The scheduler additionally waits until every node
  /// has left. While a store or the collectives opened on this node are
  /// still open, it only gives up this handle's hold: the last of them to
  /// leave runs the barrier. Idempotent. Throws PeerLost.
  void Finalize();

 private:
  friend struct api::ClusterAccess;  // src/api/cluster.cc
  struct Impl;
  explicit Cluster(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Where this process stands among the processes on its host.
struct LocalPlacement {
  std::string contract;  ///< the start-up contract that said so: "torchrun", "slurm", ...
  int local_rank = 0;    ///< 0..local_size-1
  int local_size = 1;
};

/// Reads this process's local rank and size from the first start-up
/// contract (docs/contracts.md) that its environment alone describes:
/// tandem, Open MPI, PMI, Slurm, torchrun, TrainJob, Indexed Job, Volcano
/// (not DMLC, which places roles rather than hosts' processes, and not PMIx,
/// which would talk to the launcher's server). Joins nothing; any thread;
/// nothing when no such contract is present. Throws ConfigError naming a
/// variable that is present but unusable. Defined in
/// src/cluster/contract_detection.cc.
std::optional<LocalPlacement> ReadLocalPlacement();

/// For programs that a launcher starts in every role (as MXNet's launch.py
/// did, and Kubeflow's MXJob does with one image): if the environment says
/// this process is the scheduler or a server, runs that role (a server runs
/// tandem's parameter server, docs/kvstore.md) until the job ends and
/// returns the process exit code to return from main(); returns nothing in
/// a worker, which then goes on with its own work. Under mpirun, srun or
/// torchrun with TANDEM_NUM_SERVERS=S, the last S ranks are the servers
/// (docs/contracts.md). Defined in src/kv/serve_role.cc.
std::optional<int> ServeAssignedRole();

}  // namespace tandem
