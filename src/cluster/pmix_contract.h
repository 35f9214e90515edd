// The PMIx start-up contract: a process started by Open MPI's mpirun (4.1
// and later) or by `srun --mpi=pmix` asks the launcher's PMIx server where
// it stands, and rank 0 publishes the rendezvous address to every other
// rank through the server (put, commit, fence, get), so that a job of peers
// needs no TANDEM_COORDINATOR and no MASTER_ADDR. docs/contracts.md, "PMIx".
//
// The pure parts (the markers, the contract from the server's facts, rank
// 0's address, the exchange over a PmixSession) are separate from the one
// that talks to libpmix (ReadPmixContract), which contract_detection.cc
// runs only when no explicit contract won.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "base/environment.h"
#include "cluster/launch_contract.h"
#include "cluster/pmix_session.h"
#include "tandem/error.h"

namespace tandem::cluster {

/// The PMIx key under which rank 0 publishes the rendezvous address,
/// "host:port" ("[v6]:port" for IPv6), as a PMIX_STRING with PMIX_GLOBAL
/// scope.
inline constexpr const char* kPmixCoordinatorKey = "tandem.coordinator";

/// Written to the process environment after the exchange:
/// "<namespace> <host:port>". Later start-ups in the same process
/// (tandem::ServeAssignedRole, then KVStore::Create) read it instead of
/// fencing again: every rank must reach the fence exactly once.
inline constexpr const char* kPmixCoordinatorMemoVariable = "TANDEM_PMIX_COORDINATOR";

/// libpmix cannot serve this process (PMIx_Init failed: the server named by
/// the PMIX_* variables is gone; or tandem was built without libpmix).
/// contract_detection.cc then tries the contracts after PMIx.
class PmixUnavailable : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

/// True when the PMIx contract's markers are present: PMIX_RANK and
/// PMIX_NAMESPACE (set by the PMIx server for every process it starts).
bool HasPmixMarkers(const base::Environment& env);

/// Where the process stands by the server's facts: name "pmix", rank, world
/// size PMIX_JOB_SIZE, local rank and size, node PMIX_NODEID of
/// PMIX_NUM_NODES; the coordinator only when given explicitly
/// (TANDEM_COORDINATOR, else MASTER_ADDR and MASTER_PORT). Throws
/// ConfigError for facts out of range (ValidateLaunchContract).
LaunchContract PmixContractFromFacts(const PmixJobFacts& facts, const base::Environment& env);

/// The host rank 0 publishes, by the order the rest of tandem uses for a
/// node's own address (node_address.h): DMLC_NODE_HOST as given; else the
/// address of DMLC_INTERFACE; else 127.0.0.1 when the whole job runs on
/// one node (PMIX_NUM_NODES is 1); else rank 0's host name as PMIx gives it
/// (PMIX_HOSTNAME; worker 0 then listens on every interface, as for
/// Slurm's node names). Throws ConfigError when none of these applies.
std::string PmixCoordinatorHost(const PmixJobFacts& facts, const base::Environment& env);

/// Where the coordinator of a completed PMIx contract came from.
enum class PmixCoordinatorSource {
  kAlone,       ///< a job of one process: no exchange, no coordinator
  kExplicit,    ///< TANDEM_COORDINATOR or MASTER_ADDR: no exchange
  kRemembered,  ///< kPmixCoordinatorMemoVariable of this namespace
  kExchanged,   ///< rank 0 published it and every rank fenced now
};

struct PmixContract {
  LaunchContract contract;
  PmixCoordinatorSource source = PmixCoordinatorSource::kAlone;
  std::string nspace;  ///< the job's PMIx namespace
};

/// The contract from `session`: its facts, and the coordinator: explicit
/// when given, else remembered (kPmixCoordinatorMemoVariable in `env`, for
/// the same namespace), else exchanged: rank 0 chooses its address
/// (PmixCoordinatorHost) and a port the kernel finds free on it, publishes
/// them under kPmixCoordinatorKey; every rank fences (at most `timeout`);
/// the others read rank 0's value. Throws Timeout from the fence or the
/// read, ConfigError for a value that is not host:port (naming rank 0 and
/// the key), IoError when rank 0 cannot bind its address.
PmixContract CompletePmixContract(PmixSession& session, const base::Environment& env,
                                  std::chrono::milliseconds timeout);

/// The reader contract_detection.cc calls: nothing without the markers;
/// else connects to the job's PMIx server (PmixClient), completes the
/// contract with the fence limited by TANDEM_START_TIMEOUT, writes
/// kPmixCoordinatorMemoVariable to the process environment after an
/// exchange, and disconnects. Throws PmixUnavailable when libpmix cannot
/// connect (or is not built in), and what CompletePmixContract throws.
/// Thread: the process's start-up; it writes the process environment
/// (setenv), so no other thread may read it meanwhile.
std::optional<LaunchContract> ReadPmixContract(const base::Environment& env);

}  // namespace tandem::cluster
