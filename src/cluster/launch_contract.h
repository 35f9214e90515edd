// The start-up contracts of the launchers and cluster managers tandem runs
// under, each read into one normalised description of where a process
// stands: rank, world size, local rank and size, node rank and count, and
// the coordinator (where rank 0 serves the rendezvous).
//
// One reader per contract, each in its own file (tandem_contract.cc,
// ompi_contract.cc, pmi_contract.cc, slurm_contract.cc, torchrun_contract.cc,
// trainjob_contract.cc, tf_config_contract.cc, sge_contract.cc,
// indexed_job_contract.cc, volcano_contract.cc).
// Each returns nothing when its marker variables are absent and throws
// ConfigError naming the variable when they are present but unusable.
// contract_detection.cc tries them in the documented order
// (docs/contracts.md); the DMLC contract, which names roles, is read by
// dmlc_contract.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/environment.h"
#include "tandem/cluster.h"

namespace tandem::cluster {

/// Where one process of a job of equal peers stands.
struct LaunchContract {
  std::string name;          ///< "tandem", "ompi", "slurm", "torchrun", ... (for the log)
  std::optional<Role> role;  ///< only when the contract names a role
  /// With a role: the job's servers and workers, when the contract gives
  /// them (Volcano's task sizes); else the role's rank and world size only.
  /// Without a role, `num_servers` is the servers the contract itself names
  /// (TF_CONFIG's ps tasks), which are the last ranks.
  std::optional<int> num_servers;
  std::optional<int> num_workers;
  int rank = 0;  ///< 0..world_size-1
  int world_size = 1;
  int local_rank = 0;  ///< among the processes on this node
  int local_size = 1;
  int node_rank = 0;  ///< which node of node_count
  int node_count = 1;
  /// Where rank 0 (or the scheduler) listens. An empty host means the
  /// contract does not say; port 0 likewise.
  std::string coordinator_host;
  uint16_t coordinator_port = 0;

  /// "torchrun: rank 3 of 8 (local 1 of 2, node 1 of 4), coordinator
  /// master:29500".
  std::string ToString() const;
};

/// The port used when a contract gives a coordinator host but no port:
/// torch.distributed's customary 29500.
inline constexpr uint16_t kDefaultCoordinatorPort = 29500;

/// Parses "host:port", "[v6]:port" or a bare host (port 0) from
/// `variable`'s `value`. Throws ConfigError naming the variable.
std::pair<std::string, uint16_t> ParseCoordinator(const std::string& variable,
                                                  const std::string& value);

/// Checks 0 <= rank < size (and the same for local and node ranks); throws
/// ConfigError naming the contract and the numbers.
void ValidateLaunchContract(const LaunchContract& c);

std::optional<LaunchContract> ReadTandemContract(const base::Environment& env);
std::optional<LaunchContract> ReadOmpiContract(const base::Environment& env);
std::optional<LaunchContract> ReadPmiContract(const base::Environment& env);
std::optional<LaunchContract> ReadSlurmContract(const base::Environment& env);
std::optional<LaunchContract> ReadTorchrunContract(const base::Environment& env);
std::optional<LaunchContract> ReadTrainJobContract(const base::Environment& env);
std::optional<LaunchContract> ReadTfConfigContract(const base::Environment& env);
std::optional<LaunchContract> ReadSgeContract(const base::Environment& env);
std::optional<LaunchContract> ReadIndexedJobContract(const base::Environment& env);
std::optional<LaunchContract> ReadVolcanoContract(const base::Environment& env);

/// Expands a Slurm hostlist ("gpu[01-04,07],cpu[1-2]", "a,b", "n[1-2]-ib")
/// in order, keeping zero padding. Throws ConfigError on malformed text
/// (unbalanced brackets, a reversed or non-numeric range) or more than
/// 1,000,000 hosts.
std::vector<std::string> ExpandSlurmHostlist(const std::string& list);

/// Expands Slurm's tasks-per-node form ("2(x3),1" -> {2,2,2,1}). Throws
/// ConfigError on malformed text.
std::vector<int> ExpandSlurmTasksPerNode(const std::string& text);

}  // namespace tandem::cluster
