// What `tandem launch`'s command line asks for, in whichever launcher's
// spelling it came (MXNet's -n, horovodrun's and mpirun's -np and -H
// host:SLOTS, torchrun's --nproc-per-node and --nnodes, tandem's --workers
// MIN:MAX), checked for agreement and resolved into the launcher, its hosts
// and the number of workers. docs/launch.md, "Usage" and "Elastic worker
// counts".
#pragma once

#include <string>
#include <vector>

#include "launch/hostfile.h"

namespace tandem::launch {

/// The counts and choices of the command line; 0 means "not given".
/// Thread-safety: a value type.
struct LaunchRequest {
  std::string launcher = "local";  ///< --launcher: local, ssh, mpi, slurm or sge
  bool launcher_given = false;     ///< --launcher was on the command line
  int num_workers = 0;             ///< -n / -np
  int nproc_per_node = 0;          ///< torchrun's --nproc-per-node
  int nnodes = 0;                  ///< torchrun's --nnodes
  int num_servers = 0;             ///< -s
  bool servers_given = false;      ///< -s given (without it worker 0 hosts the rendezvous)
  bool no_scheduler = false;       ///< --no-scheduler
  int min_workers = 0;             ///< --workers MIN:MAX's MIN (N for --workers N)
  int max_workers = 0;             ///< --workers MIN:MAX's MAX (N for --workers N)
};

/// The job the request resolves to. Thread-safety: a value type.
struct LaunchPlan {
  std::string launcher;          ///< "ssh" when -H names another host and --launcher is not given
  std::vector<HostSlots> hosts;  ///< empty for the local launcher (-H localhost:2 is -n 2)
  int num_workers = 0;           ///< >= 1
  /// The fewest workers the job goes on with: MIN of --workers MIN:MAX,
  /// else num_workers (every lost worker fails the job). 1..num_workers.
  int min_workers = 0;
};

/// Resolves `request` with the hosts of -H or --hostfile (`hosts`, empty
/// when neither is given). The workers are -n, or --nproc-per-node times
/// --nnodes (each host then gets that many slots), or the sum of the
/// hosts' slots; --workers MIN:MAX counts as -n MAX. Throws
/// InvalidArgument naming the flags when they disagree: -n against
/// --workers' MAX or against --nproc-per-node x --nnodes, --nnodes above 1
/// with the local or sge launcher or against the number of ssh/mpi hosts,
/// --no-scheduler with servers, or no count at all; and for an elastic
/// --workers MIN:MAX (MIN < MAX) under a launcher other than local and ssh
/// (mpirun, srun and Grid Engine end the whole job when one rank fails) or
/// without a scheduler process of its own (no -s, or --no-scheduler:
/// worker 0 hosts the rendezvous, and the collectives are not elastic).
/// Pure.
LaunchPlan PlanLaunch(const LaunchRequest& request, std::vector<HostSlots> hosts);

}  // namespace tandem::launch
