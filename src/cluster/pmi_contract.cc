// The PMI contract of MPICH's Hydra (mpiexec) and others:
//   PMI_RANK, PMI_SIZE                    required together
//   MPI_LOCALRANKID, MPI_LOCALNRANKS      Hydra's local rank and count
// Nodes are numbered as in ompi_contract.cc; the coordinator comes from
// TANDEM_COORDINATOR or MASTER_ADDR/MASTER_PORT.
#include "cluster/launch_contract.h"
#include "cluster/mpi_coordinator.h"

namespace tandem::cluster {

std::optional<LaunchContract> ReadPmiContract(const base::Environment& env) {
  if (!env.Get("PMI_RANK") || !env.Get("PMI_SIZE")) return std::nullopt;
  LaunchContract c;
  c.name = "pmi";
  c.world_size = static_cast<int>(env.GetInt("PMI_SIZE", 1, 1, 1 << 20));
  c.rank = static_cast<int>(env.GetInt("PMI_RANK", 0, 0, c.world_size - 1));
  c.local_size = static_cast<int>(env.GetInt("MPI_LOCALNRANKS", 1, 1, c.world_size));
  c.local_rank = static_cast<int>(env.GetInt("MPI_LOCALRANKID", 0, 0, c.local_size - 1));
  c.node_count = (c.world_size + c.local_size - 1) / c.local_size;
  c.node_rank = c.rank / c.local_size;
  FillCoordinatorFromEnvironment(env, c);
  ValidateLaunchContract(c);
  return c;
}

}  // namespace tandem::cluster
