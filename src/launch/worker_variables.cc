#include "launch/worker_variables.h"

#include <fmt/format.h>

#include <algorithm>

#include "tandem/error.h"

namespace tandem::launch {

std::vector<WorkerPlacement> PlaceWorkers(const std::vector<size_t>& process_host,
                                          size_t first_worker) {
  if (first_worker >= process_host.size()) {
    throw InvalidArgument(
        fmt::format("placing workers: the first worker is process {}, but the "
                    "job has {} processes",
                    first_worker, process_host.size()));
  }
  const size_t workers = process_host.size() - first_worker;
  // Hosts with workers, numbered in the order their first worker appears.
  std::vector<size_t> hosts;
  std::map<size_t, int> on_host;
  for (size_t i = first_worker; i < process_host.size(); ++i) {
    if (std::find(hosts.begin(), hosts.end(), process_host[i]) == hosts.end()) {
      hosts.push_back(process_host[i]);
    }
    ++on_host[process_host[i]];
  }
  std::vector<WorkerPlacement> out(workers);
  std::map<size_t, int> seen;
  for (size_t w = 0; w < workers; ++w) {
    const size_t host = process_host[first_worker + w];
    WorkerPlacement& p = out[w];
    p.rank = static_cast<int>(w);
    p.world_size = static_cast<int>(workers);
    p.local_rank = seen[host]++;
    p.local_size = on_host[host];
    p.node_rank = static_cast<int>(std::find(hosts.begin(), hosts.end(), host) - hosts.begin());
    p.node_count = static_cast<int>(hosts.size());
  }
  return out;
}

std::vector<size_t> ContiguousHosts(const std::vector<int>& per_host, size_t processes) {
  std::vector<size_t> out;
  out.reserve(processes);
  for (size_t h = 0; h < per_host.size() && out.size() < processes; ++h) {
    for (int k = 0; k < per_host[h] && out.size() < processes; ++k) out.push_back(h);
  }
  const size_t last = per_host.empty() ? 0 : per_host.size() - 1;
  while (out.size() < processes) out.push_back(last);
  return out;
}

std::map<std::string, std::string> WorkerVariables(const WorkerPlacement& p,
                                                   const std::string& master_addr,
                                                   uint16_t master_port) {
  std::map<std::string, std::string> env = {
      {"RANK", std::to_string(p.rank)},
      {"WORLD_SIZE", std::to_string(p.world_size)},
      {"LOCAL_RANK", std::to_string(p.local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(p.local_size)},
      {"GROUP_RANK", std::to_string(p.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(p.node_count)},
      {"ROLE_RANK", std::to_string(p.rank)},
      {"ROLE_WORLD_SIZE", std::to_string(p.world_size)},
      {"HOROVOD_RANK", std::to_string(p.rank)},
      {"HOROVOD_SIZE", std::to_string(p.world_size)},
      {"HOROVOD_LOCAL_RANK", std::to_string(p.local_rank)},
      {"HOROVOD_LOCAL_SIZE", std::to_string(p.local_size)},
  };
  if (!master_addr.empty()) env["MASTER_ADDR"] = master_addr;
  if (master_port != 0) env["MASTER_PORT"] = std::to_string(master_port);
  return env;
}

const std::vector<std::string>& WorkerVariableNames() {
  static const std::vector<std::string> kNames = {
      "RANK",         "WORLD_SIZE",       "LOCAL_RANK",         "LOCAL_WORLD_SIZE",
      "GROUP_RANK",   "GROUP_WORLD_SIZE", "ROLE_RANK",          "ROLE_WORLD_SIZE",
      "HOROVOD_RANK", "HOROVOD_SIZE",     "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
      "MASTER_ADDR",  "MASTER_PORT"};
  return kNames;
}

}  // namespace tandem::launch
