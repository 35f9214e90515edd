// JobSet (jobset.x-k8s.io/v1alpha2): one replicated Job per role, each an
// Indexed Job; pods are JOBSET-RJOB-0-INDEX in the subdomain JOBSET, which
// the JobSet controller serves with a headless Service.
//   collectives: one replicated Job "worker"; tandem reads the Indexed Job
//     contract (JOB_COMPLETION_INDEX and the injected WORLD_SIZE) with
//     TANDEM_COORDINATOR naming NAME-worker-0-0.NAME.
//   parameter server: "scheduler", "server" and "worker", each pod given the
//     DMLC contract with the scheduler at NAME-scheduler-0-0.NAME.
// A retryable failure restarts the whole set (failurePolicy), a permanent
// exit code fails it (src/base/exit_code.h).
#include <fmt/format.h>

#include "k8s/pod_template.h"
#include "k8s/render.h"

namespace tandem::k8s {

std::vector<json> RenderJobSet(const JobDescription& d) {
  std::vector<json> objects;
  std::string group;
  if (d.gang_volcano) {
    group = d.name;
    objects.push_back(VolcanoPodGroup(d, group, d.TotalPods()));
  }
  const bool ps = d.strategy == Strategy::kParameterServer;
  const std::string scheduler_host = fmt::format("{}-scheduler-0-0.{}", d.name, d.name);
  const std::string coordinator = fmt::format("{}-worker-0-0.{}:{}", d.name, d.name, d.port);
  json replicated = json::array();
  for (Role role : RolesOf(d)) {
    ContainerOptions c;
    c.role = role;
    if (ps) {
      c.extra_env = DmlcEnv(d, role, scheduler_host);
    } else {
      c.extra_env = json::array({EnvVar("WORLD_SIZE", std::to_string(d.workers)),
                                 EnvVar("TANDEM_COORDINATOR", coordinator)});
    }
    json spec = PodSpec(d, json::array({Container(d, c)}), BatchPodRestartPolicy(d));
    json job_template = {{"metadata", {{"labels", Labels(d, RoleName(role))}}},
                         {"spec", IndexedJobSpec(d, ReplicasOf(d, role),
                                                 PodTemplate(d, role, spec, group), c.name, true)}};
    replicated.push_back({{"name", RoleName(role)}, {"replicas", 1}, {"template", job_template}});
  }
  json jobset = {
      {"apiVersion", "jobset.x-k8s.io/v1alpha2"},
      {"kind", "JobSet"},
      {"metadata", ObjectMetadata(d, d.name, "")},
      {"spec",
       {{"network",
         {{"enableDNSHostnames", true}, {"subdomain", d.name}, {"publishNotReadyAddresses", true}}},
        {"failurePolicy", JobSetFailurePolicy(d)},
        {"successPolicy", {{"operator", "All"}, {"targetReplicatedJobs", json::array({"worker"})}}},
        {"replicatedJobs", replicated}}}};
  objects.push_back(jobset);
  return objects;
}

}  // namespace tandem::k8s
