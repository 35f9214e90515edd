// torchrun, and Kubeflow's PyTorchJob, give:
//   MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE    (RANK and WORLD_SIZE mark it)
//   LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK      (torchrun only)
// Under torchrun every process has its own RANK. A PyTorchJob pod whose
// command is not torchrun but which asks for more than one process per pod
// (PET_NPROC_PER_NODE > 1) has RANK = the pod's rank and WORLD_SIZE counting
// pods: such a contract is refused here with what to do instead, since the
// pod's single process is not one rank: `tandem spawn-local` starts the
// pod's processes instead (src/launch/local_spawn.h), each with RANK,
// LOCAL_RANK and the rest as torchrun gives them, plus TANDEM_SPAWN_LOCAL,
// which makes the contract's name "spawn-local".
#include <fmt/format.h>

#include "cluster/launch_contract.h"
#include "tandem/error.h"

namespace tandem::cluster {

std::optional<LaunchContract> ReadTorchrunContract(const base::Environment& env) {
  if (!env.Get("RANK") || !env.Get("WORLD_SIZE") || env.Get("JOB_COMPLETION_INDEX")) {
    return std::nullopt;  // an Indexed Job with an injected WORLD_SIZE is read elsewhere
  }
  LaunchContract c;
  c.name = env.Get("TORCHELASTIC_RUN_ID") ? "torchrun" : "pytorchjob";
  if (env.Get("TANDEM_SPAWN_LOCAL") && env.Get("LOCAL_RANK")) c.name = "spawn-local";
  c.world_size = static_cast<int>(env.GetInt("WORLD_SIZE", 1, 1, 1 << 20));
  c.rank = static_cast<int>(env.GetInt("RANK", 0, 0, c.world_size - 1));
  bool spawned = env.Get("LOCAL_RANK").has_value();
  int nproc = 1;
  if (auto p = env.Get("PET_NPROC_PER_NODE"); p && !p->empty()) {
    nproc = static_cast<int>(env.GetInt("PET_NPROC_PER_NODE", 1, 1, 1 << 16));
  }
  if (!spawned && nproc > 1) {
    throw ConfigError(fmt::format(
        "PyTorchJob asks for {} processes per pod (PET_NPROC_PER_NODE) but this process was not "
        "started by torchrun (no LOCAL_RANK), so RANK={} is the pod's rank: run the command "
        "through torchrun or `tandem spawn-local --`, or set nprocPerNode to 1",
        nproc, c.rank));
  }
  c.local_rank = static_cast<int>(env.GetInt("LOCAL_RANK", 0, 0, 1 << 16));
  c.local_size = static_cast<int>(env.GetInt("LOCAL_WORLD_SIZE", 1, 1, c.world_size));
  c.node_count = c.world_size / c.local_size;
  if (c.world_size % c.local_size != 0) {
    throw ConfigError(fmt::format("WORLD_SIZE={} is not a multiple of LOCAL_WORLD_SIZE={}",
                                  c.world_size, c.local_size));
  }
  c.node_rank =
      static_cast<int>(env.GetInt("GROUP_RANK", c.rank / c.local_size, 0, c.node_count - 1));
  c.coordinator_host = env.GetString("MASTER_ADDR", "");
  if (c.coordinator_host.empty()) {
    throw ConfigError(
        fmt::format("{} contract (RANK, WORLD_SIZE) without MASTER_ADDR: every "
                    "process needs rank 0's address",
                    c.name));
  }
  c.coordinator_port =
      static_cast<uint16_t>(env.GetInt("MASTER_PORT", kDefaultCoordinatorPort, 1, 65535));
  ValidateLaunchContract(c);
  return c;
}

}  // namespace tandem::cluster
