// From whatever start-up contract describes this process (torchrun, srun,
// mpirun, an Indexed Job, ...: contract_detection.h) to the one the cluster
// layer runs on: the DMLC variables (dmlc_contract.h), with worker 0
// hosting the rendezvous in-process when the contract names no scheduler.
// docs/contracts.md, "From a contract to a job", gives the mapping.
//
// Cluster::Join, KVStore::Create, Collectives::Join and ServeAssignedRole
// all pass their environment through ResolveStartupEnvironment first, so
// they agree on the role of the process.
#pragma once

#include <map>
#include <string>

#include "base/environment.h"

namespace tandem::cluster {

/// Set in a resolved environment: what the contract was, for the log
/// ("torchrun: rank 3 of 4 (...) as worker 3 of 4, 0 servers, worker 0
/// hosts the rendezvous at 127.0.0.1:29501"). Its presence makes
/// ResolveStartupEnvironment return the environment unchanged.
inline constexpr const char* kResolvedContractVariable = "TANDEM_STARTUP_CONTRACT";

/// The environment `env` with the DMLC variables set from the contract that
/// describes it (DMLC_ROLE, DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT,
/// DMLC_NUM_SERVER, DMLC_NUM_WORKER, DMLC_WORKER_ID or DMLC_SERVER_ID, and
/// TANDEM_RENDEZVOUS_IN_PROCESS=1 for jobs of peers) and
/// kResolvedContractVariable. A DMLC contract passes through with only the
/// latter added.
/// Throws ConfigError naming the variable when the contract is unusable
/// (a job of several peers without a rendezvous address, more servers than
/// processes, a role without the job's counts).
/// Thread: any, except under PMIx (PMIX_RANK and PMIX_NAMESPACE set and no
/// explicit contract): then it talks to the launcher's PMIx server, fences
/// with every rank (Timeout after TANDEM_START_TIMEOUT) and writes
/// TANDEM_PMIX_COORDINATOR into the process environment (pmix_contract.h),
/// so call it at start-up, from one thread.
std::map<std::string, std::string> ResolveStartupEnvironment(const base::Environment& env);

}  // namespace tandem::cluster
