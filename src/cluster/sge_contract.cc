// Grid Engine gives every process of a job (docs/contracts.md, "Grid
// Engine"):
//   JOB_ID, and SGE_TASK_ID: the task's index in an array job (`qsub -t
//       FIRST-LAST:STEP`), the word "undefined" in any other job
//   SGE_TASK_FIRST, SGE_TASK_LAST, SGE_TASK_STEPSIZE in an array job
//   PE, NSLOTS, NHOSTS in a parallel job; PE_HOSTFILE in its job script
//   JOB_NAME=petask in a task that `qrsh -inherit` started in a parallel job
//
// Only an array job ranks its processes: task SGE_TASK_ID is rank
// (SGE_TASK_ID - SGE_TASK_FIRST) / SGE_TASK_STEPSIZE of the tasks in the
// range. Grid Engine places each array task on its own and says nowhere
// where the first one runs, so the coordinator is TANDEM_COORDINATOR or
// MASTER_ADDR and MASTER_PORT, as for mpirun (without one, a job of several
// ranks is refused when the contract is turned into a job).
//
// A task of a parallel job gets no rank at all: qrsh -inherit starts
// whatever it is told, and the pe task numbers Grid Engine keeps count the
// tasks in the order they started. Such a task is refused, unless it was
// given its role (DMLC_ROLE, which `tandem launch --launcher sge` sets and
// the DMLC contract reads). The job script of a parallel job is one process
// (`qsub -pe smp 8` of a threaded program is common): no contract, so it
// runs alone unless another contract describes it.
#include <fmt/format.h>

#include <charconv>

#include "cluster/launch_contract.h"
#include "cluster/mpi_coordinator.h"
#include "tandem/error.h"

namespace tandem::cluster {
namespace {

bool IsNumber(const std::string& text) {
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return !text.empty() && ec == std::errc() && ptr == text.data() + text.size();
}

// An array job's variable, which Grid Engine always sets beside a numeric
// SGE_TASK_ID.
int64_t ArrayVariable(const base::Environment& env, const char* name, int64_t min) {
  if (!env.Get(name) || env.Get(name)->empty()) {
    throw ConfigError(fmt::format(
        "SGE_TASK_ID={} marks a task of a Grid Engine array job, but {} is not set: the rank "
        "and the number of tasks come from SGE_TASK_FIRST, SGE_TASK_LAST and SGE_TASK_STEPSIZE",
        env.GetString("SGE_TASK_ID", ""), name));
  }
  return env.GetInt(name, 0, min, 1LL << 40);
}

}  // namespace

std::optional<LaunchContract> ReadSgeContract(const base::Environment& env) {
  const std::optional<std::string> job = env.Get("JOB_ID");
  const std::optional<std::string> task = env.Get("SGE_TASK_ID");
  if (!job || !task) return std::nullopt;
  if (env.GetString("JOB_NAME", "") == "petask" && !env.Get("DMLC_ROLE")) {
    throw ConfigError(fmt::format(
        "JOB_NAME=petask: Grid Engine started this process with qrsh -inherit as a task of "
        "parallel job {} (NSLOTS={}), and such a task gets no rank from Grid Engine: start the "
        "job's processes with `tandem launch --launcher sge`, which gives each task its rank, or "
        "give every process TANDEM_RANK and TANDEM_WORLD_SIZE (docs/contracts.md)",
        *job, env.GetString("NSLOTS", "?")));
  }
  if (!IsNumber(*task)) return std::nullopt;  // "undefined": not an array job
  const int64_t id = env.GetInt("SGE_TASK_ID", 0, 1, 1LL << 40);
  const int64_t first = ArrayVariable(env, "SGE_TASK_FIRST", 1);
  const int64_t last = ArrayVariable(env, "SGE_TASK_LAST", first);
  const int64_t step = ArrayVariable(env, "SGE_TASK_STEPSIZE", 1);
  if (id < first || id > last || (id - first) % step != 0) {
    throw ConfigError(fmt::format(
        "SGE_TASK_ID={} is not a task of the array {}-{}:{} (SGE_TASK_FIRST, SGE_TASK_LAST, "
        "SGE_TASK_STEPSIZE)",
        id, first, last, step));
  }
  const int64_t tasks = (last - first) / step + 1;
  if (tasks > (1 << 20)) {
    throw ConfigError(
        fmt::format("the Grid Engine array {}-{}:{} has {} tasks; tandem runs at most {} ranks",
                    first, last, step, tasks, 1 << 20));
  }
  LaunchContract c;
  c.name = "sge";
  c.world_size = static_cast<int>(tasks);
  c.rank = static_cast<int>((id - first) / step);
  // Each array task is placed on its own: one process per placement.
  c.node_rank = c.rank;
  c.node_count = c.world_size;
  FillCoordinatorFromEnvironment(env, c);
  ValidateLaunchContract(c);
  return c;
}

}  // namespace tandem::cluster
