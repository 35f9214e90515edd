// What the MPI launchers' contracts (ompi_contract.cc, pmi_contract.cc)
// share: a process's place from the launcher's rank variables, and the
// coordinator of a job whose launcher (mpirun, mpiexec) gives ranks but no
// rendezvous address: taken from TANDEM_COORDINATOR, else MASTER_ADDR and
// MASTER_PORT, as most MPI job scripts pass them.
#pragma once

#include <optional>

#include "cluster/launch_contract.h"

namespace tandem::cluster {

/// Fills c.coordinator_host/port from the variables above, if set.
void FillCoordinatorFromEnvironment(const base::Environment& env, LaunchContract& c);

/// The variable names one MPI launcher uses for a process's place.
struct MpiRankVariables {
  const char* rank;        ///< required, with size
  const char* size;        ///< required, with rank
  const char* local_rank;  ///< default 0
  const char* local_size;  ///< default 1
};

/// The contract `name` of an MPI-style launcher: nothing when `vars.rank` or
/// `vars.size` is unset; else rank and size, local rank and size, nodes
/// numbered as by-slot mapping places ranks (node = rank / local size, the
/// same number of ranks per node assumed; the numbers serve only the log),
/// and the coordinator from FillCoordinatorFromEnvironment. Throws
/// ConfigError for out-of-range values (naming the variable) and what
/// ValidateLaunchContract refuses.
std::optional<LaunchContract> ReadMpiStyleContract(const base::Environment& env, const char* name,
                                                   const MpiRankVariables& vars);

}  // namespace tandem::cluster
