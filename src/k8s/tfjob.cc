// TFJob (kubeflow.org/v1): one Chief and WORKERS-1 Worker replicas, and for
// a parameter server SERVERS PS replicas running `tandem server`. The
// operator gives every pod TF_CONFIG, whose cluster lists each task's
// Service address with the container port named tfjob-port; tandem reads
// it as the TFJob contract (docs/contracts.md): the chief is rank 0 and
// hosts the scheduler in-process at that port, the ps tasks are the
// servers. No Evaluator replicas (tandem runs none). The operator needs
// the container named "tensorflow".
#include "k8s/pod_template.h"
#include "k8s/render.h"

namespace tandem::k8s {

std::vector<json> RenderTFJob(const JobDescription& d) {
  const bool ps = d.strategy == Strategy::kParameterServer;
  json replicas = json::object();
  auto replica = [&](Role role, int count) {
    ContainerOptions c;
    c.name = "tensorflow";
    c.role = role;
    c.port_name = "tfjob-port";
    // A parameter-server node announces the pod's IP, as under MXJob.
    if (ps) c.extra_env = json::array({NodeHostEnv()});
    json spec = PodSpec(d, json::array({Container(d, c)}), "");
    return json{{"replicas", count},
                {"restartPolicy", KubeflowRestartPolicy(d)},
                {"template", PodTemplate(d, role, spec)}};
  };
  replicas["Chief"] = replica(Role::kWorker, 1);
  if (d.workers > 1) replicas["Worker"] = replica(Role::kWorker, d.workers - 1);
  if (ps) replicas["PS"] = replica(Role::kServer, d.servers);
  // No scheduler pod: the chief hosts the scheduler in-process.
  json run_policy = KubeflowRunPolicy(d, d.workers + (ps ? d.servers : 0));
  json job = {{"apiVersion", "kubeflow.org/v1"},
              {"kind", "TFJob"},
              {"metadata", ObjectMetadata(d, d.name, "")},
              {"spec", {{"runPolicy", run_policy}, {"tfReplicaSpecs", replicas}}}};
  return {job};
}

}  // namespace tandem::k8s
