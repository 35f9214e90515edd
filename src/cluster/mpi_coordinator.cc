#include "cluster/mpi_coordinator.h"

namespace tandem::cluster {

void FillCoordinatorFromEnvironment(const base::Environment& env, LaunchContract& c) {
  if (auto coordinator = env.Get("TANDEM_COORDINATOR"); coordinator && !coordinator->empty()) {
    std::tie(c.coordinator_host, c.coordinator_port) =
        ParseCoordinator("TANDEM_COORDINATOR", *coordinator);
  } else if (auto addr = env.Get("MASTER_ADDR"); addr && !addr->empty()) {
    c.coordinator_host = *addr;
    c.coordinator_port = static_cast<uint16_t>(env.GetInt("MASTER_PORT", 0, 1, 65535));
  }
  if (!c.coordinator_host.empty() && c.coordinator_port == 0) {
    c.coordinator_port = kDefaultCoordinatorPort;
  }
}

std::optional<LaunchContract> ReadMpiStyleContract(const base::Environment& env, const char* name,
                                                   const MpiRankVariables& vars) {
  if (!env.Get(vars.rank) || !env.Get(vars.size)) return std::nullopt;
  LaunchContract c;
  c.name = name;
  c.world_size = static_cast<int>(env.GetInt(vars.size, 1, 1, 1 << 20));
  c.rank = static_cast<int>(env.GetInt(vars.rank, 0, 0, c.world_size - 1));
  c.local_size = static_cast<int>(env.GetInt(vars.local_size, 1, 1, c.world_size));
  c.local_rank = static_cast<int>(env.GetInt(vars.local_rank, 0, 0, c.local_size - 1));
  c.node_count = (c.world_size + c.local_size - 1) / c.local_size;
  c.node_rank = c.rank / c.local_size;
  FillCoordinatorFromEnvironment(env, c);
  ValidateLaunchContract(c);
  return c;
}

}  // namespace tandem::cluster
