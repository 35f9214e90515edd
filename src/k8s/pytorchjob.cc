// PyTorchJob (kubeflow.org/v1): one Master and WORKERS-1 Worker replicas,
// one process per pod (nprocPerNode "1"), or processes_per_node N with the
// command behind `tandem spawn-local --`. The operator sets MASTER_ADDR
// (NAME-master-0), MASTER_PORT (the container port named pytorchjob-port),
// RANK, WORLD_SIZE and PET_*; tandem reads them as the torchrun/PyTorchJob
// contract (docs/contracts.md). The operator needs the container named
// "pytorch".
//
// An elastic job (min_workers below workers) has an elasticPolicy
// (minReplicas, maxReplicas, maxRestarts), and its Master runs `tandem
// scheduler` alone, so that the rendezvous outlives any worker pod; the
// WORKERS Worker pods carry the DMLC contract (the scheduler at
// NAME-master-0) and TANDEM_MIN_WORKERS, which tandem reads before the
// operator's RANK and WORLD_SIZE (an explicit role wins). A worker pod the
// operator starts again joins the running job in a departed worker's place
// (docs/elastic.md).
#include <string>

#include "k8s/pod_template.h"
#include "k8s/render.h"
#include "tandem/error.h"

namespace tandem::k8s {

namespace {

// The Master and Worker replicas of an elastic job, and its elasticPolicy.
json ElasticSpec(const JobDescription& d) {
  const std::string scheduler_host = d.name + "-master-0";
  json min_workers = EnvVar("TANDEM_MIN_WORKERS", std::to_string(d.min_workers));
  json replicas = json::object();
  for (Role role : {Role::kScheduler, Role::kWorker}) {
    ContainerOptions c;
    c.name = "pytorch";
    c.role = role;
    c.port_name = "pytorchjob-port";
    c.extra_env = DmlcEnv(d, role, scheduler_host);
    c.extra_env.push_back(min_workers);
    json spec = PodSpec(d, json::array({Container(d, c)}), "");
    replicas[role == Role::kScheduler ? "Master" : "Worker"] = {
        {"replicas", role == Role::kScheduler ? 1 : d.workers},
        {"restartPolicy", KubeflowRestartPolicy(d)},
        {"template", PodTemplate(d, role, spec)}};
  }
  return {{"elasticPolicy",
           {{"minReplicas", d.min_workers},
            {"maxReplicas", d.workers},
            {"maxRestarts", d.backoff_limit}}},
          {"pytorchReplicaSpecs", replicas}};
}

}  // namespace

std::vector<json> RenderPyTorchJob(const JobDescription& d) {
  if (d.strategy != Strategy::kCollectives) {
    throw InvalidArgument(
        "kind pytorchjob runs collectives jobs only (its replicas are a Master and Workers, with "
        "no place for a scheduler and servers); render strategy 'parameter-server' as mxjob, "
        "tfjob, "
        "jobset, indexed-job or volcano-job");
  }
  json spec = {{"nprocPerNode", std::to_string(d.processes_per_node)},
               {"runPolicy", KubeflowRunPolicy(d, d.TotalPods())}};
  if (d.Elastic()) {
    spec.update(ElasticSpec(d));
  } else {
    ContainerOptions c;
    c.name = "pytorch";
    c.port_name = "pytorchjob-port";
    json pod = PodSpec(d, json::array({Container(d, c)}), "");
    json replica = {{"restartPolicy", KubeflowRestartPolicy(d)},
                    {"template", PodTemplate(d, Role::kWorker, pod)}};
    json replicas = json::object();
    replicas["Master"] = replica;
    replicas["Master"]["replicas"] = 1;
    if (d.workers > 1) {
      replicas["Worker"] = replica;
      replicas["Worker"]["replicas"] = d.workers - 1;
    }
    spec["pytorchReplicaSpecs"] = replicas;
  }
  json job = {{"apiVersion", "kubeflow.org/v1"},
              {"kind", "PyTorchJob"},
              {"metadata", ObjectMetadata(d, d.name, "")},
              {"spec", spec}};
  return {job};
}

}  // namespace tandem::k8s
