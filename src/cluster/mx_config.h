// MX_CONFIG: the JSON that Kubeflow's training-operator (MXJob, up to
// v1.8) gives every pod of an MXJob alongside the DMLC_* variables it
// derives from it (docs/contracts.md, "DMLC and MXJob"):
//
//   {"cluster": {"scheduler": [{"url": "job-scheduler-0", "port": 9091}],
//                "server":    [{"url": "job-server-0", "port": 9091}, ...],
//                "worker":    [{"url": "job-worker-0", "port": 9091}, ...]},
//    "labels":  {"scheduler": "", "server": "", "worker": ""},
//    "task":    {"type": "worker", "index": 1}}
//
// The operator sets DMLC_ROLE = task.type, DMLC_PS_ROOT_URI and _PORT =
// cluster.scheduler[0], DMLC_NUM_SERVER and DMLC_NUM_WORKER = the lengths
// of cluster.server and cluster.worker, and for a worker DMLC_WORKER_ID =
// task.index. "labels" (TVM tuner keys) is not read.
#pragma once

#include <map>
#include <string>

namespace tandem::cluster {

/// The DMLC variables MX_CONFIG's `text` implies, each with where it came
/// from ("task.type"): DMLC_ROLE, DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT (when
/// cluster.scheduler has an entry), DMLC_NUM_SERVER, DMLC_NUM_WORKER (the
/// lengths of cluster.server and cluster.worker, 0 when absent), and
/// DMLC_WORKER_ID or DMLC_SERVER_ID (task.index) for a worker or a server.
/// Thread-safety: a value type.
struct MxConfigVariables {
  std::map<std::string, std::string> values;
  std::map<std::string, std::string> sources;  ///< variable -> the JSON path it came from
};

/// Parses MX_CONFIG. Throws ConfigError naming MX_CONFIG and the JSON
/// parser's error for malformed JSON, and naming the field ("MX_CONFIG:
/// cluster.worker[2].port is not an integer") for a wrong shape: the top
/// level and "cluster" must be objects, "task" an object with a string
/// "type" and a non-negative integer "index", every cluster entry an array
/// of objects with a string "url" and an integer "port" in 1..65535. Pure.
MxConfigVariables ParseMxConfig(const std::string& text);

/// `env` with MX_CONFIG's variables added where absent. Where a DMLC_*
/// variable is present and MX_CONFIG implies another value, throws
/// ConfigError naming both: "DMLC_NUM_WORKER=4 but MX_CONFIG's
/// cluster.worker gives 3". Without MX_CONFIG in `env`, returns `env`.
/// Throws what ParseMxConfig throws. Pure.
std::map<std::string, std::string> WithMxConfig(const std::map<std::string, std::string>& env);

}  // namespace tandem::cluster
