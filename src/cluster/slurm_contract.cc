// Slurm's srun gives every task of a job step:
//   SLURM_STEP_ID, SLURM_PROCID, SLURM_STEP_NUM_TASKS   (srun only: a batch
//       script or salloc shell has SLURM_JOB_ID but no step tasks, and
//       processes that mpirun starts inside an allocation inherit SLURM_*
//       too, which is why the MPI contracts are tried first)
//   SLURM_LOCALID, SLURM_NODEID, SLURM_STEP_NUM_NODES
//   SLURM_STEP_NODELIST (compressed, e.g. "gpu[01-04,07]")
//   SLURM_STEP_TASKS_PER_NODE (e.g. "2(x3),1")
// Rank 0 runs on the first node of the step under both block and cyclic
// distribution, so the coordinator is that node. Its port is MASTER_PORT if
// set, else derived from the job and step ids so that concurrent steps on
// one node do not collide: 10000 + (job id * 16 + step id) mod 22768, which
// stays below Linux's ephemeral ports (32768..60999) so that no outgoing
// connection holds it.
#include <fmt/format.h>

#include "cluster/launch_contract.h"
#include "tandem/error.h"

namespace tandem::cluster {

std::optional<LaunchContract> ReadSlurmContract(const base::Environment& env) {
  if (!env.Get("SLURM_STEP_ID") || !env.Get("SLURM_PROCID") || !env.Get("SLURM_STEP_NUM_TASKS")) {
    return std::nullopt;
  }
  LaunchContract c;
  c.name = "slurm";
  c.world_size = static_cast<int>(env.GetInt("SLURM_STEP_NUM_TASKS", 1, 1, 1 << 20));
  c.rank = static_cast<int>(env.GetInt("SLURM_PROCID", 0, 0, c.world_size - 1));
  c.node_count = static_cast<int>(env.GetInt("SLURM_STEP_NUM_NODES", 1, 1, c.world_size));
  c.node_rank = static_cast<int>(env.GetInt("SLURM_NODEID", 0, 0, c.node_count - 1));
  c.local_rank = static_cast<int>(env.GetInt("SLURM_LOCALID", 0, 0, c.world_size - 1));
  if (auto tasks = env.Get("SLURM_STEP_TASKS_PER_NODE"); tasks && !tasks->empty()) {
    auto per_node = ExpandSlurmTasksPerNode(*tasks);
    if (static_cast<int>(per_node.size()) != c.node_count) {
      throw ConfigError(
          fmt::format("SLURM_STEP_TASKS_PER_NODE='{}' names {} nodes but SLURM_STEP_NUM_NODES={}",
                      *tasks, per_node.size(), c.node_count));
    }
    c.local_size = per_node[static_cast<size_t>(c.node_rank)];
  } else {
    c.local_size = c.world_size / c.node_count;
  }
  std::string list = env.GetString("SLURM_STEP_NODELIST", env.GetString("SLURM_JOB_NODELIST", ""));
  if (list.empty()) {
    throw ConfigError(
        "started by srun (SLURM_STEP_ID is set) but neither SLURM_STEP_NODELIST nor "
        "SLURM_JOB_NODELIST names the nodes: cannot find rank 0's node");
  }
  auto hosts = ExpandSlurmHostlist(list);
  if (static_cast<int>(hosts.size()) < c.node_count) {
    throw ConfigError(fmt::format("Slurm node list '{}' has {} hosts for {} nodes", list,
                                  hosts.size(), c.node_count));
  }
  c.coordinator_host = hosts.front();
  if (env.Get("MASTER_PORT")) {
    c.coordinator_port = static_cast<uint16_t>(env.GetInt("MASTER_PORT", 0, 1, 65535));
  } else {
    int64_t job = env.GetInt("SLURM_JOB_ID", 0, 0);
    // A step id may be a word ("batch", "extern") outside srun; srun's is a number.
    int64_t step = env.GetInt("SLURM_STEP_ID", 0, 0);
    c.coordinator_port = static_cast<uint16_t>(10000 + (job * 16 + step) % 22768);
  }
  ValidateLaunchContract(c);
  return c;
}

}  // namespace tandem::cluster
