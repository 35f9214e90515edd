// Which start-up contract describes this process: the readers of
// launch_contract.h and dmlc_contract.h tried in the documented order
// (docs/contracts.md), the first match winning.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/environment.h"
#include "cluster/dmlc_contract.h"
#include "cluster/launch_contract.h"

namespace tandem::cluster {

/// The winning contract: exactly one of `dmlc` (a job with roles and a
/// scheduler, as MXNet's) and `peers` (ranks of equal processes; rank 0
/// hosts the rendezvous) is set.
struct DetectedContract {
  std::string name;
  std::optional<ProcessDescription> dmlc;
  std::optional<LaunchContract> peers;
  /// Contracts whose marker variables are present too but lost (a Slurm
  /// allocation's variables under mpirun, say), for the log.
  std::vector<std::string> also_present;

  /// "ompi: rank 3 of 8 (...) [also present, ignored: slurm]".
  std::string ToString() const;
};

/// Tries, in order: tandem (TANDEM_WORLD_SIZE), DMLC with an explicit role
/// and scheduler address (DMLC_ROLE and DMLC_PS_ROOT_URI), PMIx, Open MPI,
/// PMI, Slurm (srun), torchrun/PyTorchJob, TrainJob, TFJob (TF_CONFIG), Grid
/// Engine (an array job's SGE_TASK_ID), Indexed Job, Volcano;
/// otherwise a single process. Throws ConfigError from the winning reader
/// (its variables are present but unusable). A reader further down the list
/// that would throw does not matter once an earlier one matched.
/// Only PMIx talks to anything: with PMIX_RANK and PMIX_NAMESPACE, and no
/// explicit contract, ReadPmixContract (pmix_contract.h) asks the
/// launcher's PMIx server and may fence with every other rank (throwing
/// Timeout); a server that cannot be reached hands over to the readers
/// after it, and when none matches this throws ConfigError saying why.
DetectedContract DetectContract(const base::Environment& env);

/// The first contract that the environment alone describes, in
/// DetectContract's order without DMLC (it places roles, not processes on
/// hosts) and PMIx (it talks to a server and may fence): tandem, Open MPI,
/// PMI, Slurm, torchrun, TrainJob, TFJob, Grid Engine, Indexed Job, Volcano; nothing
/// when none matches. For what a process may learn without joining a job (its local
/// rank and size: tandem.local_rank() in Python). Any thread. Throws
/// ConfigError from the winning reader.
std::optional<LaunchContract> ReadEnvironmentContract(const base::Environment& env);

}  // namespace tandem::cluster
