// MXJob (kubeflow.org/v1; training-operator up to v1.8, removed in v1.9):
// Scheduler, Server and Worker replicas. The operator sets the DMLC
// contract in every pod (DMLC_ROLE, DMLC_PS_ROOT_URI = NAME-scheduler-0,
// DMLC_PS_ROOT_PORT from the container port named mxjob-port,
// DMLC_NUM_SERVER, DMLC_NUM_WORKER, DMLC_USE_KUBERNETES=1) and one Service
// per pod; it needs the container named "mxnet".
#include <fmt/format.h>

#include "k8s/pod_template.h"
#include "k8s/render.h"
#include "tandem/error.h"

namespace tandem::k8s {

std::vector<json> RenderMXJob(const JobDescription& d) {
  if (d.strategy != Strategy::kParameterServer) {
    throw InvalidArgument(
        "kind mxjob runs parameter-server jobs only (MXJob's pods are a scheduler, servers and "
        "workers); render strategy 'collectives' as pytorchjob, mpijob, tfjob, trainjob, jobset, "
        "indexed-job or volcano-job");
  }
  json replicas = json::object();
  const char* kReplicaType[] = {"Scheduler", "Server", "Worker"};
  for (Role role : RolesOf(d)) {
    ContainerOptions c;
    c.name = "mxnet";
    c.role = role;
    c.port_name = "mxjob-port";
    c.extra_env = json::array({NodeHostEnv()});
    json spec = PodSpec(d, json::array({Container(d, c)}), "");
    replicas[kReplicaType[static_cast<int>(role)]] = {{"replicas", ReplicasOf(d, role)},
                                                      {"restartPolicy", KubeflowRestartPolicy(d)},
                                                      {"template", PodTemplate(d, role, spec)}};
  }
  json run_policy = KubeflowRunPolicy(d, d.TotalPods());
  json job = {
      {"apiVersion", "kubeflow.org/v1"},
      {"kind", "MXJob"},
      {"metadata", ObjectMetadata(d, d.name, "")},
      {"spec", {{"jobMode", "MXTrain"}, {"runPolicy", run_policy}, {"mxReplicaSpecs", replicas}}}};
  return {job};
}

}  // namespace tandem::k8s
