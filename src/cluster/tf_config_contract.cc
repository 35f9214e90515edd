// Kubeflow's TFJob (kubeflow.org/v1) gives every pod TF_CONFIG, a JSON
// cluster spec (docs/contracts.md, "TFJob"):
//
//   {"cluster": {"chief":  ["job-chief-0.ns.svc:2222"],
//                "worker": ["job-worker-0.ns.svc:2222", ...],
//                "ps":     ["job-ps-0.ns.svc:2222", ...]},
//    "task": {"type": "worker", "index": 0}, "environment": "cloud"}
//
// The cluster's keys are the lower-cased replica types (chief, master,
// worker, ps); the operator leaves the evaluator out of the cluster but
// gives an evaluator pod its own task. tandem reads it as a job of peers:
// the chief (or master) is rank 0 and worker 0, the worker tasks follow as
// workers 1.., and the ps tasks are the servers, the last ranks; rank 0
// hosts the scheduler in-process at the chief's address. Without a chief,
// worker task 0 is rank 0. An evaluator task, a task type tandem does not
// know, and the sparse cluster of enableDynamicWorker are refused.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "cluster/launch_contract.h"
#include "tandem/error.h"

namespace tandem::cluster {
namespace {

using json = nlohmann::json;

[[noreturn]] void Bad(const std::string& what) { throw ConfigError("TF_CONFIG: " + what); }

// cluster.<type>: an array of "host:port" strings.
std::vector<std::string> Addresses(const json& cluster, const std::string& type) {
  std::vector<std::string> out;
  if (!cluster.contains(type)) return out;
  const json& list = cluster.at(type);
  if (!list.is_array()) Bad(fmt::format("cluster.{} is not an array of addresses", type));
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_string()) Bad(fmt::format("cluster.{}[{}] is not a string", type, i));
    out.push_back(list[i].get<std::string>());
  }
  return out;
}

}  // namespace

std::optional<LaunchContract> ReadTfConfigContract(const base::Environment& env) {
  const std::optional<std::string> text = env.Get("TF_CONFIG");
  if (!text) return std::nullopt;
  json doc;
  try {
    doc = json::parse(*text);
  } catch (const json::parse_error& e) {
    throw ConfigError(fmt::format("TF_CONFIG is not JSON: {}", e.what()));
  }
  if (!doc.is_object()) Bad("the top level is not an object");
  if (doc.contains("sparseCluster")) {
    Bad("sparseCluster (a TFJob with enableDynamicWorker) lists only some tasks; tandem needs "
        "every task's address: turn enableDynamicWorker off");
  }
  if (!doc.contains("cluster") || !doc["cluster"].is_object()) Bad("cluster is not an object");
  if (!doc.contains("task") || !doc["task"].is_object()) Bad("task is not an object");
  const json& cluster = doc["cluster"];
  const json& task = doc["task"];
  if (!task.contains("type") || !task["type"].is_string()) Bad("task.type is not a string");
  if (!task.contains("index") || !task["index"].is_number_integer()) {
    Bad("task.index is not an integer");
  }
  const std::string type = task["type"].get<std::string>();
  const int64_t index = task["index"].get<int64_t>();
  if (type == "evaluator") {
    Bad("task.type is 'evaluator': tandem does not run an evaluator task (the operator keeps it "
        "out of the training cluster); drop the Evaluator replicas, or evaluate in the chief");
  }
  static const char* kKnown[] = {"chief", "master", "worker", "ps"};
  for (const auto& item : cluster.items()) {
    const std::string& key = item.key();
    if (std::find_if(std::begin(kKnown), std::end(kKnown),
                     [&](const char* k) { return key == k; }) == std::end(kKnown)) {
      Bad(
          fmt::format("cluster.{}: task type '{}' is not one tandem knows (chief, master, worker, "
                      "ps)",
                      key, key));
    }
  }
  if (std::find_if(std::begin(kKnown), std::end(kKnown),
                   [&](const char* k) { return type == k; }) == std::end(kKnown)) {
    Bad(fmt::format("task.type '{}' is not one tandem knows (chief, master, worker, ps)", type));
  }
  std::map<std::string, std::vector<std::string>> tasks;
  for (const char* k : kKnown) tasks[k] = Addresses(cluster, k);
  if (!tasks["chief"].empty() && !tasks["master"].empty()) {
    Bad("cluster has both chief and master; a job has one chief");
  }
  const std::string chief_type = tasks["master"].empty() ? "chief" : "master";
  const std::vector<std::string>& chief = tasks[chief_type];
  if (chief.size() > 1) {
    Bad(fmt::format("cluster.{} lists {} tasks; a job has one chief", chief_type, chief.size()));
  }
  const std::vector<std::string>& own = tasks[type];
  if (index < 0 || index >= static_cast<int64_t>(own.size())) {
    Bad(fmt::format("task.index {} is out of range: cluster.{} lists {} task(s)", index, type,
                    own.size()));
  }
  const int chiefs = static_cast<int>(chief.size());
  const int workers = chiefs + static_cast<int>(tasks["worker"].size());
  const int servers = static_cast<int>(tasks["ps"].size());
  if (workers == 0) Bad("cluster has no chief and no worker task: no process would train");
  LaunchContract c;
  c.name = "tfjob";
  const int i = static_cast<int>(index);
  c.rank = type == "ps" ? workers + i : type == "worker" ? chiefs + i : 0;
  c.world_size = workers + servers;
  c.num_servers = servers;
  c.node_rank = c.rank;
  c.node_count = c.world_size;
  const std::string field = chiefs > 0 ? chief_type + "[0]" : "worker[0]";
  std::tie(c.coordinator_host, c.coordinator_port) = ParseCoordinator(
      "TF_CONFIG's cluster." + field, chiefs > 0 ? chief.front() : tasks["worker"].front());
  ValidateLaunchContract(c);
  return c;
}

}  // namespace tandem::cluster
