// Kubeflow Trainer's TrainJob (with the torch runtime) gives each node's pod
// torchrun's arguments as variables:
//   PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT,
//   PET_NPROC_PER_NODE
// A pod whose command is torchrun is read by torchrun_contract.cc (torchrun
// sets RANK and the rest). A pod that runs a tandem program directly is one
// rank per node: PET_NPROC_PER_NODE must then be 1 (any other value,
// "auto" and "cpu" included, is refused), and the error says to run the
// command through torchrun or `tandem spawn-local --`, which starts the
// node's processes as torchrun would (src/launch/local_spawn.h).
#include <fmt/format.h>

#include "cluster/launch_contract.h"
#include "tandem/error.h"

namespace tandem::cluster {

std::optional<LaunchContract> ReadTrainJobContract(const base::Environment& env) {
  if (!env.Get("PET_NNODES") || !env.Get("PET_NODE_RANK")) return std::nullopt;
  LaunchContract c;
  c.name = "trainjob";
  std::string nproc = env.GetString("PET_NPROC_PER_NODE", "1");
  if (nproc != "1") {
    throw ConfigError(fmt::format(
        "TrainJob asks for PET_NPROC_PER_NODE={} processes per node, but this process was "
        "started directly, not by torchrun: run the command through torchrun or through "
        "`tandem spawn-local --`, which starts the node's processes, or set numProcPerNode to 1",
        nproc));
  }
  c.node_count = static_cast<int>(env.GetInt("PET_NNODES", 1, 1, 1 << 20));
  c.node_rank = static_cast<int>(env.GetInt("PET_NODE_RANK", 0, 0, c.node_count - 1));
  c.world_size = c.node_count;
  c.rank = c.node_rank;
  c.coordinator_host = env.GetString("PET_MASTER_ADDR", "");
  if (c.coordinator_host.empty()) {
    throw ConfigError("TrainJob contract (PET_NNODES, PET_NODE_RANK) without PET_MASTER_ADDR");
  }
  c.coordinator_port =
      static_cast<uint16_t>(env.GetInt("PET_MASTER_PORT", kDefaultCoordinatorPort, 1, 65535));
  ValidateLaunchContract(c);
  return c;
}

}  // namespace tandem::cluster
