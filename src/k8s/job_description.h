// The short description of a training job that `tandem k8s render` turns
// into Kubernetes manifests (docs/deploy.md, "The job description" lists
// every field, its default and its meaning).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::k8s {

/// How the job exchanges gradients: a parameter server (a scheduler, servers
/// and workers, the DMLC contract) or collectives among peer workers.
enum class Strategy { kParameterServer, kCollectives };

/// What Kubernetes does when a pod fails (docs/deploy.md, "Exit codes and
/// restarts"): kExitCode restarts on tandem's retryable exit codes only.
enum class RestartPolicy { kExitCode, kOnFailure, kNever };

/// CPU, memory and GPUs of one replica, as Kubernetes quantities.
struct Resources {
  std::string cpu;     ///< e.g. "4" or "500m"; empty: not set
  std::string memory;  ///< e.g. "8Gi"; empty: not set
  int gpus = 0;        ///< GPUs of `gpu_resource` per replica
};

/// The deepest nesting of arrays and objects a description's text may have
/// (a valid description needs 3). Deeper text is refused before it is parsed,
/// so that no recursive walk of it can overflow the stack.
inline constexpr size_t kMaxJobDescriptionDepth = 64;

/// The job description. Thread-safety: a value type.
struct JobDescription {
  std::string name;  ///< DNS-1035 label, at most 40 characters
  std::string namespace_ = "default";
  std::string image;
  std::vector<std::string> command;  ///< the workers' argv
  Strategy strategy = Strategy::kCollectives;
  int workers = 1;
  /// Elastic jobs (kind pytorchjob, collectives): the job goes on while at
  /// least this many of its `workers` remain, and a restarted pod joins it
  /// (docs/elastic.md). Equal to `workers` (the default): not elastic.
  int min_workers = 1;
  /// Processes per worker pod (collectives, kinds trainjob and pytorchjob
  /// only): above 1 the pod's command becomes `tandem spawn-local --
  /// COMMAND...`, which starts them as torchrun would (docs/contracts.md).
  /// `workers` still counts pods (nodes).
  int processes_per_node = 1;
  /// Kind trainjob only: render the runtime as a cluster-scoped
  /// ClusterTrainingRuntime (applying it needs a cluster administrator)
  /// instead of a TrainingRuntime in the job's namespace.
  bool cluster_runtime = false;
  int servers = 0;  ///< parameter server only
  bool command_runs_all_roles = false;
  int port = 0;  ///< the rendezvous port (0 until defaulted)
  Resources worker_resources;
  Resources server_resources;  ///< servers and the scheduler
  /// The workers' pods' nodeSelector (e.g. {"pool": "gpu"}); empty: none.
  std::map<std::string, std::string> node_selector;
  /// The servers' and the scheduler's nodeSelector (parameter server only),
  /// e.g. {"pool": "cpu"} to run the servers on CPU nodes; empty: none.
  std::map<std::string, std::string> server_node_selector;
  std::string gpu_resource = "nvidia.com/gpu";
  std::string shm_size = "1Gi";  ///< /dev/shm size; empty: no memory-backed /dev/shm
  bool host_network = false;
  std::string checkpoint_claim;  ///< a PersistentVolumeClaim; empty: none
  std::string checkpoint_mount_path = "/checkpoints";
  int metrics_port = 0;  ///< 0: no metrics endpoint
  RestartPolicy restart_policy = RestartPolicy::kExitCode;
  int backoff_limit = 3;
  std::string secret_name;  ///< the Secret holding TANDEM_SECRET
  std::string secret_key = "TANDEM_SECRET";
  bool generate_secret = true;                ///< render the Secret with a fresh value
  bool gang_volcano = false;                  ///< gang scheduling through Volcano
  std::string queue;                          ///< Volcano queue; empty: the scheduler's default
  std::string priority_class;                 ///< empty: none
  std::map<std::string, std::string> env;     ///< extra variables for every pod
  std::map<std::string, std::string> labels;  ///< extra labels on every object

  /// Total pods of a parameter-server job (scheduler, servers, workers) or
  /// of a collectives job (workers, and the scheduler when elastic).
  int TotalPods() const;

  /// Whether the job goes on with fewer workers than it started with
  /// (min_workers below workers).
  bool Elastic() const { return min_workers < workers; }
};

/// Parses and checks a description. Requires: `doc` is a JSON object.
/// Fills the defaults (the port: 9091 for a parameter server, 29500 for
/// collectives; the Secret's name: NAME-tandem-secret). Throws
/// InvalidArgument naming the field, what it must be and what it was, e.g.
/// "workers must be a whole number in 1..65536, got 0", or an unknown field.
/// Never recurses into `doc`, however deep it is. Any thread.
JobDescription ParseJobDescription(const nlohmann::json& doc);

/// Parses a description's JSON text and checks it as ParseJobDescription
/// does. `source` (the file's name) starts every message. Throws
/// InvalidArgument naming the source and the field (a JSON path such as
/// `env.A[0]`) when the text nests deeper than kMaxJobDescriptionDepth
/// ("job.json: env.A[0][0][0]... nests deeper than 64 levels at byte 812
/// (line 1, column 812)"), holds a number beyond a double's range ("job.json:
/// workers must be a whole number in 1..65536, got 1e400 ..."), is not
/// valid JSON (with the byte, line and column) or is not a valid
/// description. Any thread.
JobDescription ParseJobDescriptionText(std::string_view text, const std::string& source);

/// Reads a description from a JSON file (a YAML file written in JSON's
/// syntax works as well) with ParseJobDescriptionText. Throws IoError when
/// the file cannot be read and InvalidArgument, starting with `path`, when it
/// is not a valid description.
JobDescription LoadJobDescription(const std::string& path);

/// "parameter-server" or "collectives".
const char* StrategyName(Strategy strategy);

}  // namespace tandem::k8s
