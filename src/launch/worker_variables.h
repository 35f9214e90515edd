// The variables torch.distributed (torchrun's env:// contract) and Horovod
// read, set by `tandem launch` for every worker so that an unchanged DDP or
// Horovod-shaped script runs under it. docs/launch.md, "What each process
// gets".
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tandem::launch {

/// Where one worker stands among the job's workers, numbered as torchrun
/// numbers them. Thread-safety: a value type.
struct WorkerPlacement {
  int rank = 0;        ///< RANK: the worker's index (DMLC_WORKER_ID)
  int world_size = 1;  ///< WORLD_SIZE: the number of workers
  int local_rank = 0;  ///< LOCAL_RANK: among the workers on its host
  int local_size = 1;  ///< LOCAL_WORLD_SIZE
  int node_rank = 0;   ///< GROUP_RANK: its host among the hosts with workers
  int node_count = 1;  ///< how many hosts have workers
};

/// Places the workers of a job whose process i runs on host
/// `process_host[i]` and whose workers are processes first_worker,
/// first_worker + 1, ... (the launcher's order: scheduler, servers,
/// workers). Hosts are numbered by their first worker, so the host of
/// worker 0 is GROUP_RANK 0. Throws InvalidArgument when first_worker is
/// outside the processes. Pure.
std::vector<WorkerPlacement> PlaceWorkers(const std::vector<size_t>& process_host,
                                          size_t first_worker);

/// The host of every process when they fill hosts in order, `per_host[h]`
/// processes on host h (srun's block distribution, mpirun's by-slot
/// mapping). Processes beyond the sum go to the last host. Pure.
std::vector<size_t> ContiguousHosts(const std::vector<int>& per_host, size_t processes);

/// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
/// GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE (torchrun's), and
/// HOROVOD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE (horovodrun's) for `p`; MASTER_ADDR
/// when `master_addr` is not empty and MASTER_PORT when `master_port` is
/// not 0. Pure.
std::map<std::string, std::string> WorkerVariables(const WorkerPlacement& p,
                                                   const std::string& master_addr,
                                                   uint16_t master_port);

/// The names WorkerVariables may set, so that a launcher can drop stale
/// copies from its own environment before handing it on. Pure.
const std::vector<std::string>& WorkerVariableNames();

}  // namespace tandem::launch
