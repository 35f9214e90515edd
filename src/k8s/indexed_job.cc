// A plain Kubernetes Indexed Job (batch/v1) and its headless Service NAME.
// Each pod's host name is JOB-INDEX in the Service's subdomain.
//   collectives: one Job NAME of WORKERS pods; Kubernetes sets
//     JOB_COMPLETION_INDEX, the manifest injects WORLD_SIZE, TANDEM_SUBDOMAIN
//     and MASTER_PORT, and rank 0 is NAME-0.NAME (docs/contracts.md,
//     Indexed Job).
//   parameter server: three Jobs NAME-scheduler (1 pod), NAME-server and
//     NAME-worker, each pod given the DMLC contract with the scheduler at
//     NAME-scheduler-0.NAME.
#include <fmt/format.h>

#include "k8s/pod_template.h"
#include "k8s/render.h"

namespace tandem::k8s {

std::vector<json> RenderIndexedJob(const JobDescription& d) {
  std::vector<json> objects;
  objects.push_back(HeadlessService(d, d.name));
  std::string group;
  if (d.gang_volcano) {
    group = d.name;
    objects.push_back(VolcanoPodGroup(d, group, d.TotalPods()));
  }
  const std::string scheduler_host = fmt::format("{}-scheduler-0.{}", d.name, d.name);
  for (Role role : RolesOf(d)) {
    const bool ps = d.strategy == Strategy::kParameterServer;
    const std::string job_name = ps ? fmt::format("{}-{}", d.name, RoleName(role)) : d.name;
    ContainerOptions c;
    c.role = role;
    if (ps) {
      c.extra_env = DmlcEnv(d, role, scheduler_host);
    } else {
      c.extra_env = json::array({EnvVar("WORLD_SIZE", std::to_string(d.workers)),
                                 EnvVar("TANDEM_SUBDOMAIN", d.name),
                                 EnvVar("MASTER_PORT", std::to_string(d.port))});
    }
    json spec = PodSpec(d, json::array({Container(d, c)}), BatchPodRestartPolicy(d));
    spec["subdomain"] = d.name;
    json job = {{"apiVersion", "batch/v1"},
                {"kind", "Job"},
                {"metadata", ObjectMetadata(d, job_name, ps ? RoleName(role) : "")},
                {"spec", IndexedJobSpec(d, ReplicasOf(d, role), PodTemplate(d, role, spec, group),
                                        c.name, false)}};
    objects.push_back(job);
  }
  return objects;
}

}  // namespace tandem::k8s
