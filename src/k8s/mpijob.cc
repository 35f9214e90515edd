// MPIJob (kubeflow.org/v2beta1, mpi-operator v2): a Launcher pod runs
// mpirun, which starts one rank on each Worker pod over ssh (the operator
// writes the hostfile and the ssh keys; workers run sshd). Open MPI sets
// OMPI_COMM_WORLD_* in each rank; mpirun gives no rendezvous address, so
// the launcher sets TANDEM_COORDINATOR to the first worker (rank 0 under
// one slot per worker) and forwards it and tandem's variables with -x
// (docs/contracts.md, Open MPI). The image needs openmpi-bin and
// openssh-server (deploy/Dockerfile).
#include <fmt/format.h>

#include "k8s/pod_template.h"
#include "k8s/render.h"
#include "tandem/error.h"

namespace tandem::k8s {

std::vector<json> RenderMPIJob(const JobDescription& d) {
  if (d.strategy != Strategy::kCollectives) {
    throw InvalidArgument(
        "kind mpijob runs collectives jobs only (mpirun starts equal ranks, not a scheduler and "
        "servers); render strategy 'parameter-server' as mxjob, tfjob, jobset, indexed-job or "
        "volcano-job");
  }
  // mpi-operator v2 names the workers NAME-worker-I in the headless Service
  // NAME; Open MPI places rank 0 on the hostfile's first host.
  const std::string coordinator =
      fmt::format("{}-worker-0.{}.{}.svc:{}", d.name, d.name, d.namespace_, d.port);
  std::vector<std::string> mpirun = {"mpirun",    "--allow-run-as-root",
                                     "-np",       std::to_string(d.workers),
                                     "--bind-to", "none",
                                     "-x",        "TANDEM_SECRET",
                                     "-x",        "TANDEM_JOB_ID",
                                     "-x",        "TANDEM_COORDINATOR"};
  if (d.metrics_port != 0) {
    mpirun.push_back("-x");
    mpirun.push_back("TANDEM_METRICS_PORT");
    mpirun.push_back("-x");
    mpirun.push_back("TANDEM_METRICS_ADDRESS");
  }
  for (const auto& [key, value] : d.env) {
    mpirun.push_back("-x");
    mpirun.push_back(key);
  }
  mpirun.insert(mpirun.end(), d.command.begin(), d.command.end());

  ContainerOptions launcher;
  launcher.name = "launcher";
  launcher.command = mpirun;
  launcher.port_name = "";
  launcher.resources = false;
  launcher.extra_env = json::array({EnvVar("TANDEM_COORDINATOR", coordinator)});
  json launcher_container = Container(d, launcher);
  launcher_container.erase("volumeMounts");
  launcher_container.erase("ports");  // metrics are served by the ranks, not by mpirun
  json launcher_spec = PodSpec(d, json::array({launcher_container}), "");
  launcher_spec.erase("volumes");

  ContainerOptions worker;
  worker.name = "worker";
  worker.command = {"/usr/sbin/sshd", "-De"};
  json worker_spec = PodSpec(d, json::array({Container(d, worker)}), "");

  json run_policy = KubeflowRunPolicy(d, d.workers + 1);
  json job = {{"apiVersion", "kubeflow.org/v2beta1"},
              {"kind", "MPIJob"},
              {"metadata", ObjectMetadata(d, d.name, "")},
              {"spec",
               {{"slotsPerWorker", 1},
                {"mpiImplementation", "OpenMPI"},
                {"launcherCreationPolicy", "WaitForWorkersReady"},
                {"runPolicy", run_policy},
                {"mpiReplicaSpecs",
                 {{"Launcher",
                   {{"replicas", 1},
                    {"restartPolicy", KubeflowRestartPolicy(d)},
                    {"template", PodTemplate(d, Role::kScheduler, launcher_spec)}}},
                  {"Worker",
                   {{"replicas", d.workers},
                    // sshd holds no state: a restarted one serves mpirun's next attempt.
                    {"restartPolicy", "OnFailure"},
                    {"template", PodTemplate(d, Role::kWorker, worker_spec)}}}}}}}};
  // The launcher pod runs mpirun, not a rank: its own role label, and no
  // metrics annotations (it serves no endpoint).
  json& launcher_meta = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"];
  launcher_meta["labels"]["tandem.io/role"] = "launcher";
  launcher_meta.erase("annotations");
  return {job};
}

}  // namespace tandem::k8s
