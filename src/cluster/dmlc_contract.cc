#include "cluster/dmlc_contract.h"

#include <fmt/format.h>

#include "cluster/mx_config.h"
#include "tandem/error.h"

namespace tandem::cluster {

bool HasDmlcContract(const base::Environment& env) {
  return env.Get("DMLC_ROLE").has_value() || env.Get("MX_CONFIG").has_value();
}

ProcessDescription ParseDmlcContract(const base::Environment& process_env) {
  // MXJob's MX_CONFIG fills what DMLC_* leaves out and must agree with what
  // it gives (mx_config.h).
  const base::Environment env(WithMxConfig(process_env.vars()));
  ProcessDescription d;
  d.contract = "dmlc";
  std::string role = env.GetString("DMLC_ROLE", "");
  if (role == "scheduler") {
    d.role = Role::kScheduler;
  } else if (role == "server") {
    d.role = Role::kServer;
  } else if (role == "worker") {
    d.role = Role::kWorker;
  } else {
    throw ConfigError(fmt::format("DMLC_ROLE='{}' is not one of scheduler, server, worker", role));
  }
  d.scheduler_host = env.GetString("DMLC_PS_ROOT_URI", "");
  if (d.scheduler_host.empty()) {
    throw ConfigError("DMLC_PS_ROOT_URI is not set: every process needs the scheduler's address");
  }
  if (!env.Get("DMLC_PS_ROOT_PORT")) {
    throw ConfigError("DMLC_PS_ROOT_PORT is not set: every process needs the scheduler's port");
  }
  d.scheduler_port = static_cast<uint16_t>(env.GetInt("DMLC_PS_ROOT_PORT", 0, 0, 65535));
  d.num_servers = static_cast<int>(env.GetInt("DMLC_NUM_SERVER", 0, 0, 1 << 16));
  if (!env.Get("DMLC_NUM_WORKER")) {
    throw ConfigError("DMLC_NUM_WORKER is not set: every process needs the number of workers");
  }
  d.num_workers = static_cast<int>(env.GetInt("DMLC_NUM_WORKER", 1, 1, 1 << 16));
  // Port 0 (any free port) only for a process alone with its in-process
  // rendezvous: no other process could learn the port.
  // (The scheduler node that such a worker hosts takes port 0 too; its worker learns the
  // port in-process.)
  bool alone = d.num_workers == 1 && d.num_servers == 0 &&
               (d.role == Role::kScheduler || env.GetBool("TANDEM_RENDEZVOUS_IN_PROCESS", false));
  if (d.scheduler_port == 0 && !alone) {
    throw ConfigError(
        "DMLC_PS_ROOT_PORT=0: the scheduler's port must be given (1..65535); any free port only "
        "suits a single process hosting its own rendezvous");
  }
  d.node_host = env.GetString("DMLC_NODE_HOST", "");
  d.interface = env.GetString("DMLC_INTERFACE", "");
  d.use_kubernetes = env.GetBool("DMLC_USE_KUBERNETES", false);
  if (d.role == Role::kWorker) {
    d.requested_rank = static_cast<int>(env.GetInt("DMLC_WORKER_ID", -1, 0, d.num_workers - 1));
  } else if (d.role == Role::kServer) {
    if (d.num_servers == 0) {
      throw ConfigError("DMLC_ROLE=server but DMLC_NUM_SERVER=0");
    }
    d.requested_rank = static_cast<int>(env.GetInt("DMLC_SERVER_ID", -1, 0, d.num_servers - 1));
  }
  return d;
}

}  // namespace tandem::cluster
