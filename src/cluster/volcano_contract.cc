// A Volcano Job with its env and svc plugins:
//   VC_TASK_INDEX (or VK_TASK_INDEX)  the pod's index within its task
//   VC_<TASK>_HOSTS                   every pod of task <TASK> (upper case,
//                                     '-' as '_'), comma-separated DNS names
//                                     "<job>-<task>-<i>.<job>"
//   VC_<TASK>_NUM                     the task's pod count
//   HOSTNAME                          "<job>-<task>-<i>"
// This pod's task is the one whose host list holds a name starting with
// HOSTNAME followed by '.' (or equal to it); with a single task, that task.
// Tasks named scheduler, server or worker give roles, as an MXNet job's
// would: the rank is then the index within the task and the coordinator is
// the scheduler task's first host. Otherwise every pod is a peer: tasks are
// ranked by name, a pod's rank is the pods of earlier tasks plus its index,
// and the coordinator is the first host of the first task. The port is
// MASTER_PORT, else 29500.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "cluster/launch_contract.h"
#include "tandem/error.h"

namespace tandem::cluster {
namespace {

struct VolcanoTask {
  std::vector<std::string> hosts;
  int num = 0;
};

std::vector<std::string> SplitHosts(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string h =
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!h.empty()) out.push_back(h);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

bool NamesPod(const std::string& host, const std::string& hostname) {
  return host == hostname ||
         (host.size() > hostname.size() && host.compare(0, hostname.size(), hostname) == 0 &&
          host[hostname.size()] == '.');
}

}  // namespace

std::optional<LaunchContract> ReadVolcanoContract(const base::Environment& env) {
  const char* index_var = env.Get("VC_TASK_INDEX") ? "VC_TASK_INDEX" : "VK_TASK_INDEX";
  if (!env.Get(index_var)) return std::nullopt;
  std::map<std::string, VolcanoTask> tasks;  // by upper-case name, sorted
  for (const auto& [name, value] : env.vars()) {
    constexpr std::string_view kPrefix = "VC_";
    constexpr std::string_view kSuffix = "_HOSTS";
    if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
        !name.ends_with(kSuffix)) {
      continue;
    }
    std::string task = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
    VolcanoTask& t = tasks[task];
    t.hosts = SplitHosts(value);
    std::string num_var = fmt::format("VC_{}_NUM", task);
    t.num = static_cast<int>(env.GetInt(num_var, static_cast<int64_t>(t.hosts.size()), 1, 1 << 20));
    if (t.num != static_cast<int>(t.hosts.size())) {
      throw ConfigError(fmt::format("Volcano: {}={} but {} lists {} hosts", num_var, t.num, name,
                                    t.hosts.size()));
    }
  }
  if (tasks.empty()) {
    throw ConfigError(fmt::format(
        "Volcano Job ({} is set) without any VC_<TASK>_HOSTS: enable the job's svc plugin",
        index_var));
  }
  std::string hostname = env.GetString("HOSTNAME", "");
  std::string mine;
  if (tasks.size() == 1) {
    mine = tasks.begin()->first;
  } else {
    for (const auto& [name, t] : tasks) {
      if (std::any_of(t.hosts.begin(), t.hosts.end(),
                      [&](const std::string& h) { return NamesPod(h, hostname); })) {
        mine = name;
        break;
      }
    }
    if (mine.empty()) {
      throw ConfigError(fmt::format(
          "Volcano: HOSTNAME='{}' is in none of the tasks' host lists, so this pod's task is "
          "unknown",
          hostname));
    }
  }
  const VolcanoTask& own = tasks.at(mine);
  LaunchContract c;
  c.name = "volcano";
  int index = static_cast<int>(env.GetInt(index_var, 0, 0, own.num - 1));
  static const std::map<std::string, Role> kRoles = {
      {"SCHEDULER", Role::kScheduler}, {"SERVER", Role::kServer}, {"WORKER", Role::kWorker}};
  bool roles = std::all_of(tasks.begin(), tasks.end(),
                           [](const auto& kv) { return kRoles.count(kv.first) > 0; }) &&
               tasks.count("SCHEDULER") > 0;
  if (roles) {
    c.role = kRoles.at(mine);
    c.rank = index;
    c.world_size = own.num;
    c.coordinator_host = tasks.at("SCHEDULER").hosts.front();
    c.num_servers = tasks.count("SERVER") ? tasks.at("SERVER").num : 0;
    c.num_workers = tasks.count("WORKER") ? tasks.at("WORKER").num : 0;
  } else {
    int before = 0;
    int total = 0;
    for (const auto& [name, t] : tasks) {
      if (name < mine) before += t.num;
      total += t.num;
    }
    c.rank = before + index;
    c.world_size = total;
    c.coordinator_host = tasks.begin()->second.hosts.front();
  }
  c.node_rank = c.rank;
  c.node_count = c.world_size;
  c.coordinator_port =
      static_cast<uint16_t>(env.GetInt("MASTER_PORT", kDefaultCoordinatorPort, 1, 65535));
  ValidateLaunchContract(c);
  return c;
}

}  // namespace tandem::cluster
