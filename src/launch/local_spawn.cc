#include "launch/local_spawn.h"

#include <fmt/format.h>

#include <charconv>
#include <optional>

#include "tandem/error.h"

namespace tandem::launch {
namespace {

using Env = std::map<std::string, std::string>;

std::optional<std::string> Find(const Env& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

// `name`'s value as an integer in [min, max]; ConfigError naming it otherwise.
int64_t ParseCount(const std::string& name, const std::string& value, int64_t min, int64_t max,
                   const std::string& why = "") {
  int64_t v = 0;
  const char* end = value.data() + value.size();
  auto [p, ec] = std::from_chars(value.data(), end, v);
  if (value.empty() || ec != std::errc() || p != end) {
    throw ConfigError(
        fmt::format("tandem spawn-local: {}=\"{}\" is not an integer{}", name, value, why));
  }
  if (v < min || v > max) {
    throw ConfigError(
        fmt::format("tandem spawn-local: {}={} is outside [{}, {}]", name, v, min, max));
  }
  return v;
}

}  // namespace

LocalSpawnPlan ReadLocalSpawnPlan(const Env& env) {
  LocalSpawnPlan plan;
  const bool pytorchjob = Find(env, "RANK") && Find(env, "WORLD_SIZE");
  plan.source = pytorchjob ? "pytorchjob" : "trainjob";
  auto nproc = Find(env, "PET_NPROC_PER_NODE");
  if (!nproc) {
    throw ConfigError(
        "tandem spawn-local: PET_NPROC_PER_NODE is not set: it needs the TrainJob contract "
        "(PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE, PET_MASTER_ADDR) or a PyTorchJob's "
        "(RANK, WORLD_SIZE, MASTER_ADDR, PET_NPROC_PER_NODE)");
  }
  plan.nproc_per_node = static_cast<int>(ParseCount(
      "PET_NPROC_PER_NODE", *nproc, 1, 1 << 12,
      " (a process count is needed: tandem does not count devices for auto, cpu or gpu)"));
  auto nnodes = Find(env, "PET_NNODES");
  auto node_rank = Find(env, "PET_NODE_RANK");
  if (nnodes && node_rank) {
    plan.node_count = static_cast<int>(ParseCount(
        "PET_NNODES", *nnodes, 1, 1 << 20, " (an elastic range is not supported: give a count)"));
    plan.node_rank =
        static_cast<int>(ParseCount("PET_NODE_RANK", *node_rank, 0, plan.node_count - 1));
  } else if (pytorchjob) {
    const int64_t world = ParseCount("WORLD_SIZE", *Find(env, "WORLD_SIZE"), 1, 1 << 30);
    if (world % plan.nproc_per_node != 0) {
      throw ConfigError(fmt::format(
          "tandem spawn-local: WORLD_SIZE={} is not a multiple of PET_NPROC_PER_NODE={}", world,
          plan.nproc_per_node));
    }
    plan.node_count = static_cast<int>(world / plan.nproc_per_node);
    plan.node_rank =
        static_cast<int>(ParseCount("RANK", *Find(env, "RANK"), 0, plan.node_count - 1));
  } else {
    throw ConfigError(
        fmt::format("tandem spawn-local: {} is not set: the TrainJob contract needs PET_NNODES and "
                    "PET_NODE_RANK",
                    nnodes ? "PET_NODE_RANK" : "PET_NNODES"));
  }
  if (pytorchjob) {
    // The operator's WORLD_SIZE counts processes (pods x nprocPerNode) and
    // RANK is the pod's index, which is PET_NODE_RANK.
    const int64_t world = ParseCount("WORLD_SIZE", *Find(env, "WORLD_SIZE"), 1, 1 << 30);
    const int64_t expected = int64_t{plan.node_count} * plan.nproc_per_node;
    if (world != expected) {
      throw ConfigError(fmt::format(
          "tandem spawn-local: WORLD_SIZE={} but PET_NNODES={} x PET_NPROC_PER_NODE={} is {}",
          world, plan.node_count, plan.nproc_per_node, expected));
    }
    const int64_t rank = ParseCount("RANK", *Find(env, "RANK"), 0, plan.node_count - 1);
    if (rank != plan.node_rank) {
      throw ConfigError(
          fmt::format("tandem spawn-local: RANK={} (the pod's index) but PET_NODE_RANK={}", rank,
                      plan.node_rank));
    }
  }
  auto addr = Find(env, "PET_MASTER_ADDR");
  if (!addr || addr->empty()) addr = Find(env, "MASTER_ADDR");
  if (!addr || addr->empty()) {
    throw ConfigError(
        "tandem spawn-local: neither PET_MASTER_ADDR nor MASTER_ADDR is set: every node needs the "
        "address of node 0");
  }
  plan.master_addr = *addr;
  const char* port_var = Find(env, "PET_MASTER_PORT") ? "PET_MASTER_PORT" : "MASTER_PORT";
  if (auto port = Find(env, port_var)) {
    plan.master_port = static_cast<uint16_t>(ParseCount(port_var, *port, 1, 65535));
  }
  return plan;
}

std::map<std::string, std::string> LocalProcessEnvironment(const LocalSpawnPlan& plan, int local,
                                                           const Env& env) {
  Env out = env;
  const int rank = plan.node_rank * plan.nproc_per_node + local;
  const int world = plan.node_count * plan.nproc_per_node;
  out["RANK"] = std::to_string(rank);
  out["LOCAL_RANK"] = std::to_string(local);
  out["WORLD_SIZE"] = std::to_string(world);
  out["LOCAL_WORLD_SIZE"] = std::to_string(plan.nproc_per_node);
  out["GROUP_RANK"] = std::to_string(plan.node_rank);
  out["GROUP_WORLD_SIZE"] = std::to_string(plan.node_count);
  out["ROLE_RANK"] = std::to_string(rank);
  out["ROLE_WORLD_SIZE"] = std::to_string(world);
  out["ROLE_NAME"] = "default";
  out["MASTER_ADDR"] = plan.master_addr;
  out["MASTER_PORT"] = std::to_string(plan.master_port);
  out["TANDEM_SPAWN_LOCAL"] = plan.source;
  return out;
}

std::vector<ProcessSpec> LocalSpawnProcesses(const LocalSpawnPlan& plan,
                                             const std::vector<std::string>& command,
                                             const Env& env) {
  if (command.empty()) throw InvalidArgument("tandem spawn-local: no command after '--'");
  std::vector<ProcessSpec> specs;
  for (int local = 0; local < plan.nproc_per_node; ++local) {
    ProcessSpec spec;
    spec.label = fmt::format("rank {}", plan.node_rank * plan.nproc_per_node + local);
    spec.argv = command;
    spec.env = LocalProcessEnvironment(plan, local, env);
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::string DescribeLocalSpawnPlan(const LocalSpawnPlan& plan) {
  const int first = plan.node_rank * plan.nproc_per_node;
  return fmt::format("{}: node {} of {}, {} processes (ranks {}..{} of {}), master {}:{}",
                     plan.source, plan.node_rank, plan.node_count, plan.nproc_per_node, first,
                     first + plan.nproc_per_node - 1, plan.node_count * plan.nproc_per_node,
                     plan.master_addr, plan.master_port);
}

}  // namespace tandem::launch
