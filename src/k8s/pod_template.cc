#include "k8s/pod_template.h"

#include <fmt/format.h>

#include "base/exit_code.h"

namespace tandem::k8s {

int ReplicasOf(const JobDescription& d, Role role) {
  switch (role) {
    case Role::kScheduler:
      return d.strategy == Strategy::kParameterServer || d.Elastic() ? 1 : 0;
    case Role::kServer:
      return d.servers;
    case Role::kWorker:
      return d.workers;
  }
  return 0;
}

std::vector<Role> RolesOf(const JobDescription& d) {
  if (d.strategy == Strategy::kParameterServer) {
    return {Role::kScheduler, Role::kServer, Role::kWorker};
  }
  if (d.Elastic()) return {Role::kScheduler, Role::kWorker};
  return {Role::kWorker};
}

std::vector<std::string> RoleCommand(const JobDescription& d, Role role) {
  if (role == Role::kWorker && d.processes_per_node > 1) {
    std::vector<std::string> argv{"tandem", "spawn-local", "--"};
    argv.insert(argv.end(), d.command.begin(), d.command.end());
    return argv;
  }
  if (role == Role::kWorker || d.command_runs_all_roles) return d.command;
  return {"tandem", std::string(RoleName(role))};
}

json EnvVar(const std::string& name, const std::string& value) {
  return {{"name", name}, {"value", value}};
}

json NodeHostEnv() {
  return {{"name", "DMLC_NODE_HOST"},
          {"valueFrom", {{"fieldRef", {{"fieldPath", "status.podIP"}}}}}};
}

json DmlcEnv(const JobDescription& d, Role role, const std::string& scheduler_host) {
  return json::array({EnvVar("DMLC_ROLE", std::string(RoleName(role))),
                      EnvVar("DMLC_PS_ROOT_URI", scheduler_host),
                      EnvVar("DMLC_PS_ROOT_PORT", std::to_string(d.port)),
                      EnvVar("DMLC_NUM_SERVER", std::to_string(d.servers)),
                      EnvVar("DMLC_NUM_WORKER", std::to_string(d.workers)),
                      EnvVar("DMLC_USE_KUBERNETES", "1"), NodeHostEnv()});
}

json Labels(const JobDescription& d, std::string_view role) {
  json labels = json::object();
  for (const auto& [key, value] : d.labels) labels[key] = value;
  labels["tandem.io/job"] = d.name;
  if (!role.empty()) labels["tandem.io/role"] = std::string(role);
  return labels;
}

json ObjectMetadata(const JobDescription& d, const std::string& name, std::string_view role) {
  return {{"name", name}, {"namespace", d.namespace_}, {"labels", Labels(d, role)}};
}

namespace {

json ResourcesOf(const JobDescription& d, Role role) {
  const Resources& r = role == Role::kWorker ? d.worker_resources : d.server_resources;
  json amounts = json::object();
  if (!r.cpu.empty()) amounts["cpu"] = r.cpu;
  if (!r.memory.empty()) amounts["memory"] = r.memory;
  if (r.gpus > 0) amounts[d.gpu_resource] = std::to_string(r.gpus);
  // Requests equal to limits: the pod is in the Guaranteed QoS class when
  // both cpu and memory are given, and GPUs must be requested as limits.
  return {{"requests", amounts}, {"limits", amounts}};
}

}  // namespace

json Container(const JobDescription& d, const ContainerOptions& options) {
  json env = json::array();
  env.push_back(
      {{"name", "TANDEM_SECRET"},
       {"valueFrom", {{"secretKeyRef", {{"name", d.secret_name}, {"key", d.secret_key}}}}}});
  env.push_back(EnvVar("TANDEM_JOB_ID", d.namespace_ + "/" + d.name));
  for (const auto& var : options.extra_env) env.push_back(var);
  if (d.metrics_port != 0) {
    env.push_back(EnvVar("TANDEM_METRICS_PORT", std::to_string(d.metrics_port)));
    // Prometheus scrapes the pod's IP; tandem binds loopback unless told.
    env.push_back(EnvVar("TANDEM_METRICS_ADDRESS", "0.0.0.0"));
  }
  for (const auto& [key, value] : d.env) env.push_back(EnvVar(key, value));

  json c = {{"name", options.name},
            {"image", d.image},
            {"command", options.command.empty() ? RoleCommand(d, options.role) : options.command},
            {"env", env}};
  json ports = json::array();
  if (!options.port_name.empty()) {
    ports.push_back({{"name", options.port_name}, {"containerPort", d.port}, {"protocol", "TCP"}});
  }
  if (d.metrics_port != 0) {
    ports.push_back({{"name", "metrics"}, {"containerPort", d.metrics_port}, {"protocol", "TCP"}});
  }
  if (!ports.empty()) c["ports"] = ports;
  if (options.resources) {
    json resources = ResourcesOf(d, options.role);
    if (!resources["limits"].empty()) c["resources"] = resources;
  }
  json mounts = json::array();
  if (!d.shm_size.empty()) mounts.push_back({{"name", "dshm"}, {"mountPath", "/dev/shm"}});
  if (!d.checkpoint_claim.empty()) {
    mounts.push_back({{"name", "checkpoints"}, {"mountPath", d.checkpoint_mount_path}});
  }
  if (!mounts.empty()) c["volumeMounts"] = mounts;
  return c;
}

json PodSpec(const JobDescription& d, json containers, const std::string& restart_policy) {
  json spec = {{"containers", std::move(containers)}};
  json volumes = json::array();
  if (!d.shm_size.empty()) {
    volumes.push_back(
        {{"name", "dshm"}, {"emptyDir", {{"medium", "Memory"}, {"sizeLimit", d.shm_size}}}});
  }
  if (!d.checkpoint_claim.empty()) {
    volumes.push_back(
        {{"name", "checkpoints"}, {"persistentVolumeClaim", {{"claimName", d.checkpoint_claim}}}});
  }
  if (!volumes.empty()) spec["volumes"] = volumes;
  if (d.host_network) {
    spec["hostNetwork"] = true;
    // Keep cluster DNS (Services, peers' names) on the host's network.
    spec["dnsPolicy"] = "ClusterFirstWithHostNet";
  }
  if (d.gang_volcano) spec["schedulerName"] = "volcano";
  if (!d.priority_class.empty()) spec["priorityClassName"] = d.priority_class;
  if (!restart_policy.empty()) spec["restartPolicy"] = restart_policy;
  return spec;
}

json PodTemplate(const JobDescription& d, Role role, json spec, const std::string& pod_group) {
  json metadata = {{"labels", Labels(d, RoleName(role))}};
  json annotations = json::object();
  if (d.metrics_port != 0) {
    annotations["prometheus.io/scrape"] = "true";
    annotations["prometheus.io/port"] = std::to_string(d.metrics_port);
    annotations["prometheus.io/path"] = "/metrics";
  }
  if (!pod_group.empty()) annotations["scheduling.k8s.io/group-name"] = pod_group;
  if (!annotations.empty()) metadata["annotations"] = annotations;
  const auto& selector = role == Role::kWorker ? d.node_selector : d.server_node_selector;
  if (!selector.empty()) spec["nodeSelector"] = selector;
  return {{"metadata", metadata}, {"spec", std::move(spec)}};
}

json SecretObject(const JobDescription& d, const std::string& secret_value) {
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata", ObjectMetadata(d, d.secret_name, "")},
          {"type", "Opaque"},
          {"stringData", {{d.secret_key, secret_value}}}};
}

json HeadlessService(const JobDescription& d, const std::string& name) {
  json ports = json::array({{{"name", "tandem"}, {"port", d.port}, {"protocol", "TCP"}}});
  if (d.metrics_port != 0) {
    ports.push_back({{"name", "metrics"}, {"port", d.metrics_port}, {"protocol", "TCP"}});
  }
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", ObjectMetadata(d, name, "")},
          {"spec",
           {{"clusterIP", "None"},
            {"selector", {{"tandem.io/job", d.name}}},
            {"publishNotReadyAddresses", true},
            {"ports", ports}}}};
}

json VolcanoPodGroup(const JobDescription& d, const std::string& name, int min_member) {
  json spec = {{"minMember", min_member}};
  if (!d.queue.empty()) spec["queue"] = d.queue;
  if (!d.priority_class.empty()) spec["priorityClassName"] = d.priority_class;
  return {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
          {"kind", "PodGroup"},
          {"metadata", ObjectMetadata(d, name, "")},
          {"spec", spec}};
}

std::string BatchPodRestartPolicy(const JobDescription& d) {
  return d.restart_policy == RestartPolicy::kOnFailure ? "OnFailure" : "Never";
}

json BatchPodFailurePolicy(const JobDescription& d, const std::string& container) {
  if (d.restart_policy != RestartPolicy::kExitCode) return nullptr;
  json permanent = json::array();
  for (int code : base::PermanentExitCodes()) permanent.push_back(code);
  return {
      {"rules",
       json::array({{{"action", "FailJob"},
                     {"onExitCodes",
                      {{"containerName", container}, {"operator", "In"}, {"values", permanent}}}},
                    {{"action", "Ignore"},
                     {"onPodConditions",
                      json::array({{{"type", "DisruptionTarget"}, {"status", "True"}}})}}})}};
}

json IndexedJobSpec(const JobDescription& d, int completions, json pod_template,
                    const std::string& container, bool in_jobset) {
  int backoff = d.restart_policy == RestartPolicy::kNever ? 0 : d.backoff_limit;
  if (in_jobset && d.restart_policy != RestartPolicy::kOnFailure) backoff = 0;
  json spec = {{"completionMode", "Indexed"},
               {"completions", completions},
               {"parallelism", completions},
               {"backoffLimit", backoff}};
  json failure = BatchPodFailurePolicy(d, container);
  if (!failure.is_null()) spec["podFailurePolicy"] = failure;
  spec["template"] = std::move(pod_template);
  return spec;
}

json JobSetFailurePolicy(const JobDescription& d) {
  if (d.restart_policy != RestartPolicy::kExitCode) return {{"maxRestarts", 0}};
  return {{"maxRestarts", d.backoff_limit},
          {"rules", json::array({{{"name", "PermanentExitCode"},
                                  {"action", "FailJobSet"},
                                  {"onJobFailureReasons", json::array({"PodFailurePolicy"})}}})}};
}

json KubeflowRunPolicy(const JobDescription& d, int min_available) {
  json run_policy = {{"backoffLimit", d.backoff_limit}, {"cleanPodPolicy", "Running"}};
  if (d.gang_volcano) {
    json scheduling = {{"minAvailable", min_available}};
    if (!d.queue.empty()) scheduling["queue"] = d.queue;
    if (!d.priority_class.empty()) scheduling["priorityClass"] = d.priority_class;
    run_policy["schedulingPolicy"] = scheduling;
  }
  return run_policy;
}

std::string KubeflowRestartPolicy(const JobDescription& d) {
  switch (d.restart_policy) {
    case RestartPolicy::kExitCode:
      return "ExitCode";
    case RestartPolicy::kOnFailure:
      return "OnFailure";
    case RestartPolicy::kNever:
      return "Never";
  }
  return "Never";
}

}  // namespace tandem::k8s
