// `tandem spawn-local -- COMMAND...`: several processes per node where the
// cluster manager starts one process per pod and expects it to spawn the
// node's processes as torchrun would (Kubeflow Trainer's TrainJob with
// PET_NPROC_PER_NODE > 1, a PyTorchJob with nprocPerNode > 1, neither
// running torchrun). docs/contracts.md, "Several processes per node".
//
// The node's description comes from the pod's variables:
//   TrainJob:   PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE,
//               PET_MASTER_ADDR, PET_MASTER_PORT
//   PyTorchJob: the same PET_* (the operator sets PET_NNODES, PET_NODE_RANK
//               and PET_NPROC_PER_NODE), RANK = the pod's index,
//               WORLD_SIZE = pods x nprocPerNode, MASTER_ADDR, MASTER_PORT
// and each of the N local processes gets what a torchrun-started process
// has: RANK = node_rank * N + local, LOCAL_RANK, WORLD_SIZE = nnodes * N,
// LOCAL_WORLD_SIZE = N, GROUP_RANK = node_rank, GROUP_WORLD_SIZE = nnodes,
// ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME=default, MASTER_ADDR, MASTER_PORT,
// plus TANDEM_SPAWN_LOCAL = the source contract ("trainjob" or
// "pytorchjob"). The children are then read by the torchrun reader
// (torchrun_contract.cc: LOCAL_RANK marks a spawned process), which names
// the contract "spawn-local" when TANDEM_SPAWN_LOCAL is set.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "launch/child_process.h"

namespace tandem::launch {

/// What the pod's variables say about this node. Thread-safety: a value type.
struct LocalSpawnPlan {
  std::string source;  ///< "trainjob" or "pytorchjob"
  int node_count = 1;
  int node_rank = 0;
  int nproc_per_node = 1;
  std::string master_addr;
  uint16_t master_port = 29500;
};

/// Reads the node's description from `env` (see the file comment).
/// PET_NNODES and PET_NODE_RANK are used when present, else (PyTorchJob
/// without them) RANK is the node and WORLD_SIZE / PET_NPROC_PER_NODE the
/// node count; PET_MASTER_ADDR (else MASTER_ADDR) is required, the port is
/// PET_MASTER_PORT, else MASTER_PORT, else 29500. PET_NPROC_PER_NODE must be
/// a positive integer ("auto", "cpu", "gpu" are refused: tandem does not
/// count devices). Throws ConfigError naming the variable and value when a
/// variable is missing, malformed or out of range, when an elastic range
/// (PET_NNODES=1:4) is given, and when a PyTorchJob's WORLD_SIZE is not
/// nnodes x nproc or its RANK is not PET_NODE_RANK. Pure.
LocalSpawnPlan ReadLocalSpawnPlan(const std::map<std::string, std::string>& env);

/// The environment of local process `local` (0..nproc_per_node-1): `env`
/// with the variables of the file comment set (replacing those present).
/// Requires 0 <= local < plan.nproc_per_node. Pure.
std::map<std::string, std::string> LocalProcessEnvironment(
    const LocalSpawnPlan& plan, int local, const std::map<std::string, std::string>& env);

/// The node's processes, in local order, each labelled "rank R" and running
/// `command` untouched with LocalProcessEnvironment. Throws InvalidArgument
/// when `command` is empty. Pure.
std::vector<ProcessSpec> LocalSpawnProcesses(const LocalSpawnPlan& plan,
                                             const std::vector<std::string>& command,
                                             const std::map<std::string, std::string>& env);

/// "trainjob: node 1 of 2, 2 processes (ranks 2..3 of 4), master 127.0.0.1:29500".
/// Pure.
std::string DescribeLocalSpawnPlan(const LocalSpawnPlan& plan);

}  // namespace tandem::launch
