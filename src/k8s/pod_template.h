// The pieces every manifest of `tandem k8s render` shares: labels, the
// container (image, command, tandem's variables, ports, resources, mounts),
// the pod spec (/dev/shm, checkpoints, hostNetwork, gang scheduling), the
// Secret for TANDEM_SECRET, a headless Service, a Volcano PodGroup and the
// failure policies that map tandem's exit codes (src/base/exit_code.h) onto
// each controller. docs/deploy.md describes the result per kind.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "k8s/job_description.h"
#include "tandem/cluster.h"

namespace tandem::k8s {

using nlohmann::json;

// A pod's part in the job is a tandem::Role (tandem/cluster.h); its
// RoleName() ("scheduler", "server", "worker") is DMLC_ROLE's value, the
// tandem.io/role label and the name of the role's replicas or tasks.
// Collectives jobs have workers only, and a scheduler when elastic.

/// Pods of `role` in the job.
int ReplicasOf(const JobDescription& d, Role role);

/// The roles whose pods the job has, in start order (scheduler, server,
/// worker for a parameter server; scheduler, worker for elastic
/// collectives; worker for other collectives).
std::vector<Role> RolesOf(const JobDescription& d);

/// What one container of a pod looks like beyond the description.
struct ContainerOptions {
  std::string name = "tandem";  ///< the container's name (operators require theirs)
  Role role = Role::kWorker;
  std::vector<std::string> command;  ///< empty: RoleCommand(d, role)
  std::string port_name = "tandem";  ///< the rendezvous port's name; empty: no port
  json extra_env = json::array();    ///< EnvVar objects added after tandem's own
  bool resources = true;             ///< false: no requests/limits (an MPI launcher)
};

/// The argv of a role: `tandem scheduler`, `tandem server`, or the user's
/// command (always for workers; for every role with command_runs_all_roles),
/// behind `tandem spawn-local --` for a worker when processes_per_node > 1.
std::vector<std::string> RoleCommand(const JobDescription& d, Role role);

/// {"name": name, "value": value}.
json EnvVar(const std::string& name, const std::string& value);

/// The DMLC contract of a parameter-server pod for kinds whose controller
/// does not set it (docs/cluster.md): DMLC_ROLE, DMLC_PS_ROOT_URI/PORT,
/// DMLC_NUM_SERVER/WORKER, DMLC_USE_KUBERNETES=1 and DMLC_NODE_HOST from
/// the pod's IP.
json DmlcEnv(const JobDescription& d, Role role, const std::string& scheduler_host);

/// The pod's own IP as DMLC_NODE_HOST (a parameter-server node announces it).
json NodeHostEnv();

/// Labels of every object: tandem.io/job, tandem.io/role (when not empty)
/// and the description's labels.
json Labels(const JobDescription& d, std::string_view role);

/// {"name", "namespace", "labels"} for an object of this job.
json ObjectMetadata(const JobDescription& d, const std::string& name, std::string_view role);

/// One container: image, command, TANDEM_SECRET (from the Secret),
/// TANDEM_JOB_ID, the description's env, TANDEM_METRICS_PORT, ports,
/// resources of the role, /dev/shm and checkpoint mounts.
json Container(const JobDescription& d, const ContainerOptions& options);

/// A pod spec around `containers`: volumes (/dev/shm, checkpoints),
/// hostNetwork, Volcano's schedulerName, priorityClassName, and
/// `restart_policy` ("Never" or "OnFailure"; empty: left to the controller).
json PodSpec(const JobDescription& d, json containers, const std::string& restart_policy);

/// A pod template: metadata (labels of `role`, metrics annotations, the
/// Volcano group name when `pod_group` is not empty) and `spec`, with the
/// nodeSelector of `role` (node_selector for workers, server_node_selector
/// for the servers and the scheduler) when one is given.
json PodTemplate(const JobDescription& d, Role role, json spec, const std::string& pod_group = "");

/// The Secret holding TANDEM_SECRET under the description's key.
json SecretObject(const JobDescription& d, const std::string& secret_value);

/// A headless Service named `name` over the pods labelled tandem.io/job
/// (publishing not-ready addresses, so that peers resolve while starting).
json HeadlessService(const JobDescription& d, const std::string& name);

/// A Volcano PodGroup (scheduling.volcano.sh/v1beta1) of `min_member` pods,
/// for controllers that do not make one (Indexed Job, JobSet).
json VolcanoPodGroup(const JobDescription& d, const std::string& name, int min_member);

/// The pod restart policy of a batch Job's template for the description's
/// restart policy: "OnFailure" for OnFailure, else "Never".
std::string BatchPodRestartPolicy(const JobDescription& d);

/// A batch/v1 podFailurePolicy for restart policy ExitCode: fail the Job at
/// once on tandem's permanent exit codes of `container`, ignore disruptions
/// (preemption, eviction); others count against backoffLimit. Null for the
/// other policies.
json BatchPodFailurePolicy(const JobDescription& d, const std::string& container);

/// An Indexed batch/v1 Job spec of `completions` pods from `pod_template`
/// (whose restartPolicy BatchPodRestartPolicy set), with the failure policy
/// of `container`. `in_jobset`: the JobSet restarts the whole set on a
/// retryable failure (JobSetFailurePolicy), so the Job itself retries only
/// under OnFailure.
json IndexedJobSpec(const JobDescription& d, int completions, json pod_template,
                    const std::string& container, bool in_jobset);

/// A JobSet's failurePolicy: under ExitCode, a Job failed by its pod failure
/// policy (a permanent exit code) fails the JobSet and any other failure
/// restarts the whole set, at most backoff_limit times; under Never no
/// restart; under OnFailure the Jobs retry their pods and the set is not
/// restarted.
json JobSetFailurePolicy(const JobDescription& d);

/// The Kubeflow replica restart policy: "ExitCode", "OnFailure" or "Never".
std::string KubeflowRestartPolicy(const JobDescription& d);

/// A Kubeflow job's runPolicy: backoffLimit, cleanPodPolicy Running, and
/// with Volcano gang scheduling a schedulingPolicy asking for
/// `min_available` pods (with the description's queue and priority class).
json KubeflowRunPolicy(const JobDescription& d, int min_available);

}  // namespace tandem::k8s
