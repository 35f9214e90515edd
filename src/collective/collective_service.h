// A process's collectives on top of its NodeServices: the peer mesh (whose
// handlers must be registered before the node registers with the scheduler)
// and the communicators over it.
//
// Life: construct before the node joins (api::WorkerServices does, on every
// worker node); Start() once the node joined; make groups; destroy the
// communicators, then stop the transport, then destroy the service.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "base/op_recorder.h"
#include "base/stats.h"
#include "cluster/node_services.h"
#include "collective/communicator_impl.h"
#include "collective/peer_mesh.h"
#include "tandem/collective.h"

namespace tandem::collective {

/// Settings from the environment (docs/collectives.md, "Environment").
struct CollectiveSettings {
  PeerMesh::Options mesh;
  CommunicatorSettings communicator;
  /// Reads TANDEM_COLLECTIVE_CONNECTIONS, TANDEM_COLLECTIVE_SAME_HOST_COPY,
  /// TANDEM_COLLECTIVE_MAILBOX,
  /// TANDEM_COLLECTIVE_SPIN_US,
  /// TANDEM_COLLECTIVE_TIMEOUT, TANDEM_COLLECTIVE_SEGMENT_BYTES (unset: each
  /// communicator's segment follows its placement), TANDEM_ALLREDUCE_ALGORITHM,
  /// TANDEM_MIN_WORKERS (elastic jobs), and the connect and heartbeat
  /// time-outs of `config`. Throws ConfigError.
  static CollectiveSettings FromEnvironment(const base::Environment& env,
                                            const base::Config& config);
};

/// Thread-safety: Start() once, from one thread, before anything else but
/// the constructor; then World() and NewGroup() from any thread.
class CollectiveService {
 public:
  /// Registers the mesh with `services.dispatcher` and the membership's
  /// failure news. `services`' objects are borrowed and must outlive this.
  CollectiveService(const cluster::NodeServices& services, CollectiveSettings settings);
  ~CollectiveService();

  /// Requires the node to have joined as a worker. Forms the mesh and the
  /// world communicator. Throws ConfigError (not a worker), and what
  /// PeerMesh::Connect throws.
  void Start();

  /// The current world communicator (Regroup makes a new one after a
  /// change of an elastic job's members; the earlier ones stay valid,
  /// retired, until StopWorld).
  Communicator& World();
  /// See Collectives::NewGroup. Throws InvalidArgument for a worker that
  /// left the job.
  std::unique_ptr<Communicator> NewGroup(const std::vector<int>& world_ranks);

  /// See Collectives::Regroup: a barrier of the workers that are members,
  /// then, if its answer's epoch is not the world's, a new world over them.
  Members Regroup();

  /// See Collectives::CheckJoins: rank 0's count of workers waiting to
  /// join, broadcast over the world; throws MembershipChanged when it is
  /// not 0. Nothing in a job that is not elastic.
  void CheckJoins();

  /// Destroys the world communicators (waiting for their queued operations).
  void StopWorld();

  PeerMesh& mesh() { return mesh_; }

 private:
  // The communicator settings of a group: the segment by placement
  // (CommunicatorSettings::segment_by_placement).
  CommunicatorSettings SettingsFor(const std::vector<int>& world_ranks) const;
  // The world after a change to `members` (or the one a joining worker
  // starts with): the members in worker-rank order, those in `joined` (that
  // joined since the last world) last.
  std::unique_ptr<Communicator> MakeWorld(const Members& members, const std::vector<int>& joined);
  // Regroup, again while the members are fewer than the minimum (the
  // scheduler holds each such regroup until it admits a worker). The
  // workers admitted after membership epoch `joined_after`, and
  // `newcomers`, come last in each new world: every member computes the
  // same order, and rank 0 holds the job's state.
  Members RegroupFrom(uint32_t joined_after, const std::vector<int>& newcomers);
  // One regroup: the barrier, then a new world when its epoch is newer.
  Members RegroupOnce(uint32_t joined_after, const std::vector<int>& newcomers);
  cluster::Membership& membership_;
  base::Logger& log_;
  CollectiveSettings settings_;
  base::OpRecorder ops_;  // every communicator's latencies
  base::Gauge& queued_;   // operations waiting, all communicators
  PeerMesh mesh_;
  std::mutex world_mu_;
  std::unique_ptr<Communicator> world_;                        // guarded by world_mu_
  uint32_t world_epoch_ = 0;                                   // guarded by world_mu_
  std::vector<std::unique_ptr<Communicator>> retired_worlds_;  // guarded by world_mu_
  std::mutex groups_mu_;
  std::map<std::vector<int>, uint32_t> groups_made_;  // guarded by groups_mu_
};

}  // namespace tandem::collective
