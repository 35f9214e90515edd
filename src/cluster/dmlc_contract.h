// The DMLC start-up contract: the variables MXNet's launch.py, ps-lite,
// Kubeflow's MXJob and `tandem launch` give each process.
//
//   DMLC_ROLE            scheduler | server | worker
//   DMLC_PS_ROOT_URI     the scheduler's host (name or IP)
//   DMLC_PS_ROOT_PORT    the scheduler's port
//   DMLC_NUM_SERVER      servers in the job (>= 0)
//   DMLC_NUM_WORKER      workers in the job (>= 1)
//   DMLC_NODE_HOST       this node's address as others should reach it
//   DMLC_INTERFACE       else: the interface whose address to use
//   DMLC_USE_KUBERNETES  1: the scheduler binds every interface
//   DMLC_WORKER_ID       a worker's requested rank (BytePS's variable)
//   DMLC_SERVER_ID       a server's requested rank (tandem's addition)
//   MX_CONFIG            MXJob's JSON (mx_config.h): fills the DMLC_*
//                        variables absent, must agree with those present
#pragma once

#include <cstdint>
#include <string>

#include "base/environment.h"
#include "tandem/cluster.h"

namespace tandem::cluster {

/// Where this process stands in its job, whatever contract described it.
struct ProcessDescription {
  Role role = Role::kWorker;
  std::string scheduler_host;
  uint16_t scheduler_port = 0;
  int num_servers = 0;
  int num_workers = 1;
  std::string node_host;  ///< empty: choose (interface, else route to scheduler)
  std::string interface;  ///< empty: none requested
  bool use_kubernetes = false;
  int requested_rank = -1;  ///< -1: the scheduler assigns one
  std::string contract;     ///< which contract described us, for the log
};

/// True when `env` carries the DMLC contract (DMLC_ROLE or MX_CONFIG is
/// set).
bool HasDmlcContract(const base::Environment& env);

/// Reads the DMLC contract, with MX_CONFIG's variables where DMLC_* lacks
/// them (WithMxConfig). Throws ConfigError naming the missing or bad
/// variable, MX_CONFIG's JSON error or bad field, or a DMLC_* variable and
/// the MX_CONFIG field that disagree.
ProcessDescription ParseDmlcContract(const base::Environment& env);

}  // namespace tandem::cluster
