// TrainJob (trainer.kubeflow.org/v1alpha1, Kubeflow Trainer v2) with its
// runtime tandem-NAME: a TrainingRuntime in the job's namespace, which
// whoever may create the TrainJob may create as well, or, with
// cluster_runtime, a cluster-scoped ClusterTrainingRuntime, which only a
// cluster administrator may apply. The runtime's template is a JobSet
// spec with the replicated Job "node" (container "node"); the torch policy
// makes the trainer inject PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR,
// PET_MASTER_PORT and PET_NPROC_PER_NODE, which tandem reads as the TrainJob
// contract (docs/contracts.md) with one process per node, or, with
// processes_per_node N > 1, numProcPerNode N and the command behind
// `tandem spawn-local --`, which starts the N processes.
#include <fmt/format.h>

#include "k8s/pod_template.h"
#include "k8s/render.h"
#include "tandem/error.h"

namespace tandem::k8s {

std::vector<json> RenderTrainJob(const JobDescription& d) {
  if (d.strategy != Strategy::kCollectives) {
    throw InvalidArgument(
        "kind trainjob runs collectives jobs only (a TrainJob's trainer is one set of equal "
        "nodes); render strategy 'parameter-server' as mxjob, tfjob, jobset, indexed-job or "
        "volcano-job");
  }
  const std::string runtime_name = "tandem-" + d.name;
  ContainerOptions c;
  c.name = "node";
  json spec = PodSpec(d, json::array({Container(d, c)}), BatchPodRestartPolicy(d));
  json job_template = {
      {"metadata", {{"labels", {{"trainer.kubeflow.org/trainjob-ancestor-step", "trainer"}}}}},
      {"spec", IndexedJobSpec(d, d.workers, PodTemplate(d, Role::kWorker, spec), c.name, true)}};
  json runtime_spec = {
      {"mlPolicy", {{"numNodes", d.workers}, {"torch", json::object()}}},
      {"template",
       {{"spec",
         {{"network", {{"publishNotReadyAddresses", true}}},
          {"failurePolicy", JobSetFailurePolicy(d)},
          {"replicatedJobs",
           json::array({{{"name", "node"}, {"replicas", 1}, {"template", job_template}}})}}}}}};
  if (d.gang_volcano) runtime_spec["podGroupPolicy"] = {{"volcano", json::object()}};
  const char* runtime_kind = d.cluster_runtime ? "ClusterTrainingRuntime" : "TrainingRuntime";
  // A cluster-scoped object has no namespace; Kubernetes refuses one that names one.
  json runtime_metadata = ObjectMetadata(d, runtime_name, "");
  if (d.cluster_runtime) runtime_metadata.erase("namespace");
  runtime_metadata["labels"]["trainer.kubeflow.org/framework"] = "torch";
  json runtime = {{"apiVersion", "trainer.kubeflow.org/v1alpha1"},
                  {"kind", runtime_kind},
                  {"metadata", runtime_metadata},
                  {"spec", runtime_spec}};
  json trainjob = {
      {"apiVersion", "trainer.kubeflow.org/v1alpha1"},
      {"kind", "TrainJob"},
      {"metadata", ObjectMetadata(d, d.name, "")},
      {"spec",
       {{"runtimeRef",
         {{"apiGroup", "trainer.kubeflow.org"}, {"kind", runtime_kind}, {"name", runtime_name}}},
        {"trainer", {{"numNodes", d.workers}, {"numProcPerNode", d.processes_per_node}}}}}};
  return {runtime, trainjob};
}

}  // namespace tandem::k8s
