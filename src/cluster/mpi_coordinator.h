// The coordinator of a job whose launcher (mpirun, mpiexec) gives ranks but
// no rendezvous address: taken from TANDEM_COORDINATOR, else MASTER_ADDR and
// MASTER_PORT, as `tandem launch --launcher mpi` and most MPI job scripts
// pass them.
#pragma once

#include "cluster/launch_contract.h"

namespace tandem::cluster {

/// Fills c.coordinator_host/port from the variables above, if set.
void FillCoordinatorFromEnvironment(const base::Environment& env, LaunchContract& c);

}  // namespace tandem::cluster
