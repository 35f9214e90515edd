// PyTorchJob (kubeflow.org/v1): one Master and WORKERS-1 Worker replicas,
// one process per pod (nprocPerNode "1"), or processes_per_node N with the
// command behind `tandem spawn-local --`. The operator sets MASTER_ADDR
// (NAME-master-0), MASTER_PORT (the container port named pytorchjob-port),
// RANK, WORLD_SIZE and PET_*; tandem reads them as the torchrun/PyTorchJob
// contract (docs/contracts.md). The operator needs the container named
// "pytorch".
#include "k8s/pod_template.h"
#include "k8s/render.h"
#include "tandem/error.h"

namespace tandem::k8s {

std::vector<json> RenderPyTorchJob(const JobDescription& d) {
  if (d.strategy != Strategy::kCollectives) {
    throw InvalidArgument(
        "kind pytorchjob runs collectives jobs only (its replicas are a Master and Workers, with "
        "no place for a scheduler and servers); render strategy 'parameter-server' as mxjob, "
        "tfjob, "
        "jobset, indexed-job or volcano-job");
  }
  ContainerOptions c;
  c.name = "pytorch";
  c.port_name = "pytorchjob-port";
  json spec = PodSpec(d, json::array({Container(d, c)}), "");
  json replica = {{"restartPolicy", KubeflowRestartPolicy(d)},
                  {"template", PodTemplate(d, Role::kWorker, spec)}};
  json replicas = json::object();
  replicas["Master"] = replica;
  replicas["Master"]["replicas"] = 1;
  if (d.workers > 1) {
    replicas["Worker"] = replica;
    replicas["Worker"]["replicas"] = d.workers - 1;
  }
  json run_policy = KubeflowRunPolicy(d, d.workers);
  json job = {{"apiVersion", "kubeflow.org/v1"},
              {"kind", "PyTorchJob"},
              {"metadata", ObjectMetadata(d, d.name, "")},
              {"spec",
               {{"nprocPerNode", std::to_string(d.processes_per_node)},
                {"runPolicy", run_policy},
                {"pytorchReplicaSpecs", replicas}}}};
  return {job};
}

}  // namespace tandem::k8s
