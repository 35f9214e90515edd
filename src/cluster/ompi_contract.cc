// Open MPI's mpirun (4.1) gives every process:
//   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE
//   OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE
// and no node index (OMPI_COMM_WORLD_NODE_RANK is a rank across all jobs on
// the node, not which node). tandem numbers nodes as mpirun's default
// by-slot mapping places ranks: node = rank / local size, assuming the same
// number of ranks on every node; the node numbers serve only the log. The
// coordinator comes from TANDEM_COORDINATOR or MASTER_ADDR/MASTER_PORT.
#include "cluster/launch_contract.h"
#include "cluster/mpi_coordinator.h"

namespace tandem::cluster {

std::optional<LaunchContract> ReadOmpiContract(const base::Environment& env) {
  if (!env.Get("OMPI_COMM_WORLD_RANK") || !env.Get("OMPI_COMM_WORLD_SIZE")) return std::nullopt;
  LaunchContract c;
  c.name = "ompi";
  c.world_size = static_cast<int>(env.GetInt("OMPI_COMM_WORLD_SIZE", 1, 1, 1 << 20));
  c.rank = static_cast<int>(env.GetInt("OMPI_COMM_WORLD_RANK", 0, 0, c.world_size - 1));
  c.local_size = static_cast<int>(env.GetInt("OMPI_COMM_WORLD_LOCAL_SIZE", 1, 1, c.world_size));
  c.local_rank = static_cast<int>(env.GetInt("OMPI_COMM_WORLD_LOCAL_RANK", 0, 0, c.local_size - 1));
  c.node_count = (c.world_size + c.local_size - 1) / c.local_size;
  c.node_rank = c.rank / c.local_size;
  FillCoordinatorFromEnvironment(env, c);
  ValidateLaunchContract(c);
  return c;
}

}  // namespace tandem::cluster
