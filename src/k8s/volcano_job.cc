// Volcano Job (batch.volcano.sh/v1alpha1) with the env and svc plugins:
// pods NAME-TASK-INDEX in the headless Service NAME, with VC_TASK_INDEX and
// every task's VC_<TASK>_HOSTS / VC_<TASK>_NUM, which tandem reads as the
// Volcano contract (docs/contracts.md): tasks scheduler, server and worker
// give a parameter server's roles; one task "worker" makes peers. The
// rendezvous port is MASTER_PORT. Volcano gangs the job's pods itself
// (minAvailable); policies map tandem's exit codes (src/base/exit_code.h).
#include "base/exit_code.h"
#include "k8s/pod_template.h"
#include "k8s/render.h"

namespace tandem::k8s {

namespace {

// Volcano applies the first policy that matches, so the permanent exit
// codes come before the catch-all restart on a failed or evicted pod.
json Policies(const JobDescription& d) {
  json policies = json::array();
  switch (d.restart_policy) {
    case RestartPolicy::kExitCode:
      for (int code : base::PermanentExitCodes()) {
        policies.push_back({{"exitCode", code}, {"action", "AbortJob"}});
      }
      policies.push_back(
          {{"events", json::array({"PodFailed", "PodEvicted"})}, {"action", "RestartJob"}});
      break;
    case RestartPolicy::kOnFailure:
      policies.push_back({{"event", "PodEvicted"}, {"action", "RestartJob"}});
      break;
    case RestartPolicy::kNever:
      policies.push_back(
          {{"events", json::array({"PodFailed", "PodEvicted"})}, {"action", "AbortJob"}});
      break;
  }
  return policies;
}

}  // namespace

std::vector<json> RenderVolcanoJob(const JobDescription& d) {
  json tasks = json::array();
  for (Role role : RolesOf(d)) {
    ContainerOptions c;
    c.role = role;
    c.extra_env = json::array({EnvVar("MASTER_PORT", std::to_string(d.port))});
    json spec = PodSpec(d, json::array({Container(d, c)}), BatchPodRestartPolicy(d));
    tasks.push_back({{"name", RoleName(role)},
                     {"replicas", ReplicasOf(d, role)},
                     {"template", PodTemplate(d, role, spec)}});
  }
  json spec = {{"schedulerName", "volcano"},
               {"minAvailable", d.TotalPods()},
               {"maxRetry", d.restart_policy == RestartPolicy::kNever ? 0 : d.backoff_limit},
               {"plugins", {{"env", json::array()}, {"svc", json::array()}}},
               {"policies", Policies(d)},
               {"tasks", tasks}};
  if (!d.queue.empty()) spec["queue"] = d.queue;
  if (!d.priority_class.empty()) spec["priorityClassName"] = d.priority_class;
  json job = {{"apiVersion", "batch.volcano.sh/v1alpha1"},
              {"kind", "Job"},
              {"metadata", ObjectMetadata(d, d.name, "")},
              {"spec", spec}};
  return {job};
}

}  // namespace tandem::k8s
