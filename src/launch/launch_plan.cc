#include "launch/launch_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "launch/elastic_workers.h"
#include "tandem/error.h"

namespace tandem::launch {
namespace {

// The number of workers from -n/-np (or --workers' MAX), --nproc-per-node
// x --nnodes or the slots of the hosts, whichever the command line gives;
// they must agree.
int WorkerCount(const LaunchRequest& r, const std::vector<HostSlots>& hosts) {
  const WorkerRange range{r.min_workers, r.max_workers};
  if (r.max_workers > 0 && r.num_workers > 0 && r.num_workers != r.max_workers) {
    throw InvalidArgument(
        fmt::format("-n/-np {} disagrees with {}, which starts {} workers: give one of them",
                    r.num_workers, range.Flag(), r.max_workers));
  }
  const int count = r.max_workers > 0 ? r.max_workers : r.num_workers;
  const std::string count_flag =
      r.max_workers > 0 ? range.Flag() : fmt::format("-n {}", r.num_workers);
  const int nodes = r.nnodes > 0 ? r.nnodes : 1;
  if (r.nproc_per_node > 0) {
    const int from_torchrun = r.nproc_per_node * nodes;
    if (count > 0 && count != from_torchrun) {
      throw InvalidArgument(fmt::format(
          "{} disagrees with --nproc-per-node {} x --nnodes {} = {} workers: give one of them",
          count_flag, r.nproc_per_node, nodes, from_torchrun));
    }
    return from_torchrun;
  }
  if (count > 0) return count;
  if (!hosts.empty()) {
    int slots = 0;
    for (const auto& h : hosts) slots += h.slots;
    return slots;
  }
  throw InvalidArgument(
      "how many workers? give -n N (or -np N as horovodrun, --nproc-per-node N as torchrun, or "
      "-H host:SLOTS,...)");
}

// The names of this host that -H may give.
bool IsThisHost(const std::string& host) {
  return host == "localhost" || host == "127.0.0.1" || host == "::1";
}

// An elastic job (--workers MIN:MAX, MIN < MAX) needs a launcher that lets
// a worker's process end without ending the others, and a scheduler that
// outlives every worker.
void CheckElastic(const LaunchRequest& request, const LaunchPlan& plan) {
  const std::string flag = WorkerRange{plan.min_workers, plan.num_workers}.Flag();
  if (plan.launcher != "local" && plan.launcher != "ssh") {
    const char* program = plan.launcher == "mpi"     ? "mpirun"
                          : plan.launcher == "slurm" ? "srun"
                                                     : "Grid Engine (qrsh)";
    throw InvalidArgument(fmt::format(
        "{} lets workers leave the job, but under --launcher {} {} ends the whole job when one "
        "rank fails: elastic worker counts need --launcher local or ssh",
        flag, plan.launcher, program));
  }
  if (request.no_scheduler || !request.servers_given) {
    throw InvalidArgument(fmt::format(
        "{} lets workers leave a parameter-server job, which needs its scheduler as a process of "
        "its own: give -s SERVERS{}; {}worker 0 hosts the rendezvous, and the collectives are "
        "not elastic yet (docs/elastic.md)",
        flag, request.no_scheduler ? " instead of --no-scheduler" : "",
        request.no_scheduler ? "with --no-scheduler " : "without -s "));
  }
}

}  // namespace

LaunchPlan PlanLaunch(const LaunchRequest& request, std::vector<HostSlots> hosts) {
  LaunchPlan plan;
  plan.launcher = request.launcher;
  // As horovodrun: hosts other than this one are reached over ssh.
  const bool remote = std::any_of(hosts.begin(), hosts.end(),
                                  [](const HostSlots& h) { return !IsThisHost(h.host); });
  if (!request.launcher_given && remote) plan.launcher = "ssh";
  plan.num_workers = WorkerCount(request, hosts);
  if (plan.launcher == "local" && !hosts.empty() && !remote) hosts.clear();  // -H localhost:2
  if (request.nnodes > 1) {
    if (plan.launcher == "local") {
      throw InvalidArgument(fmt::format(
          "--nnodes {}: the local launcher starts the job on this host only; use --launcher "
          "slurm, or -H with {} hosts (ssh, mpi)",
          request.nnodes, request.nnodes));
    }
    if (plan.launcher == "sge") {
      throw InvalidArgument(fmt::format(
          "--nnodes {}: under Grid Engine the parallel environment places the slots on hosts "
          "(its allocation_rule); give the number of workers with -n (or --nproc-per-node "
          "alone)",
          request.nnodes));
    }
    if ((plan.launcher == "ssh" || plan.launcher == "mpi") &&
        static_cast<int>(hosts.size()) != request.nnodes) {
      throw InvalidArgument(fmt::format("--nnodes {} but -H/--hostfile names {} host{}",
                                        request.nnodes, hosts.size(),
                                        hosts.size() == 1 ? "" : "s"));
    }
  }
  if (request.nproc_per_node > 0) {
    for (auto& h : hosts) h.slots = request.nproc_per_node;  // torchrun: the same on every node
  }
  if (request.no_scheduler && request.num_servers > 0) {
    throw InvalidArgument(fmt::format(
        "--no-scheduler starts only the workers, but -s asks for {} server{}: drop one of them",
        request.num_servers, request.num_servers == 1 ? "" : "s"));
  }
  plan.min_workers = request.min_workers > 0 ? request.min_workers : plan.num_workers;
  if (IsElastic(plan.min_workers, plan.num_workers)) CheckElastic(request, plan);
  plan.hosts = std::move(hosts);
  return plan;
}

}  // namespace tandem::launch
