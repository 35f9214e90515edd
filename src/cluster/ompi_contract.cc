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
  return ReadMpiStyleContract(env, "ompi",
                              {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                               "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"});
}

}  // namespace tandem::cluster
