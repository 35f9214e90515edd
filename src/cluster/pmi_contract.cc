// The PMI contract of MPICH's Hydra (mpiexec) and others:
//   PMI_RANK, PMI_SIZE                    required together
//   MPI_LOCALRANKID, MPI_LOCALNRANKS      Hydra's local rank and count
// Nodes are numbered as in ompi_contract.cc; the coordinator comes from
// TANDEM_COORDINATOR or MASTER_ADDR/MASTER_PORT.
#include "cluster/launch_contract.h"
#include "cluster/mpi_coordinator.h"

namespace tandem::cluster {

std::optional<LaunchContract> ReadPmiContract(const base::Environment& env) {
  return ReadMpiStyleContract(env, "pmi",
                              {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"});
}

}  // namespace tandem::cluster
