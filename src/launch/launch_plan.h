// What `tandem launch`'s command line asks for, in whichever launcher's
// spelling it came (MXNet's -n, horovodrun's and mpirun's -np and -H
// host:SLOTS, torchrun's --nproc-per-node and --nnodes), checked for
// agreement and resolved into the launcher, its hosts and the number of
// workers. docs/launch.md, "Usage".
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
  bool no_scheduler = false;       ///< --no-scheduler
};

/// The job the request resolves to. Thread-safety: a value type.
struct LaunchPlan {
  std::string launcher;          ///< "ssh" when -H names another host and --launcher is not given
  std::vector<HostSlots> hosts;  ///< empty for the local launcher (-H localhost:2 is -n 2)
  int num_workers = 0;           ///< >= 1
};

/// Resolves `request` with the hosts of -H or --hostfile (`hosts`, empty
/// when neither is given). The workers are -n, or --nproc-per-node times
/// --nnodes (each host then gets that many slots), or the sum of the
/// hosts' slots. Throws InvalidArgument naming the flags when they
/// disagree: -n against --nproc-per-node x --nnodes, --nnodes above 1 with
/// the local or sge launcher or against the number of ssh/mpi hosts,
/// --no-scheduler with servers, or no count at all. Pure.
LaunchPlan PlanLaunch(const LaunchRequest& request, std::vector<HostSlots> hosts);

}  // namespace tandem::launch
