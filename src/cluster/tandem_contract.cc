// tandem's own explicit contract, which beats every inferred one:
//   TANDEM_WORLD_SIZE, TANDEM_RANK        required together
//   TANDEM_ROLE                           scheduler | server | worker (optional)
//   TANDEM_LOCAL_RANK, TANDEM_LOCAL_SIZE  default 0 and 1
//   TANDEM_NODE_RANK, TANDEM_NODE_COUNT   default 0 and 1
//   TANDEM_COORDINATOR                    host:port of rank 0's rendezvous
#include <fmt/format.h>

#include "cluster/launch_contract.h"
#include "tandem/error.h"

namespace tandem::cluster {

std::optional<LaunchContract> ReadTandemContract(const base::Environment& env) {
  if (!env.Get("TANDEM_WORLD_SIZE")) return std::nullopt;
  LaunchContract c;
  c.name = "tandem";
  c.world_size = static_cast<int>(env.GetInt("TANDEM_WORLD_SIZE", 1, 1, 1 << 20));
  if (!env.Get("TANDEM_RANK")) {
    throw ConfigError(
        "TANDEM_WORLD_SIZE is set but TANDEM_RANK is not: give every process its rank");
  }
  c.rank = static_cast<int>(env.GetInt("TANDEM_RANK", 0, 0, c.world_size - 1));
  c.local_rank = static_cast<int>(env.GetInt("TANDEM_LOCAL_RANK", 0, 0, 1 << 20));
  c.local_size = static_cast<int>(env.GetInt("TANDEM_LOCAL_SIZE", 1, 1, 1 << 20));
  c.node_rank = static_cast<int>(env.GetInt("TANDEM_NODE_RANK", 0, 0, 1 << 20));
  c.node_count = static_cast<int>(env.GetInt("TANDEM_NODE_COUNT", 1, 1, 1 << 20));
  if (auto role = env.Get("TANDEM_ROLE"); role && !role->empty()) {
    if (*role == "scheduler") {
      c.role = Role::kScheduler;
    } else if (*role == "server") {
      c.role = Role::kServer;
    } else if (*role == "worker") {
      c.role = Role::kWorker;
    } else {
      throw ConfigError(
          fmt::format("TANDEM_ROLE='{}' is not one of scheduler, server, worker", *role));
    }
  }
  if (auto coordinator = env.Get("TANDEM_COORDINATOR")) {
    std::tie(c.coordinator_host, c.coordinator_port) =
        ParseCoordinator("TANDEM_COORDINATOR", *coordinator);
    if (c.coordinator_port == 0) c.coordinator_port = kDefaultCoordinatorPort;
  }
  ValidateLaunchContract(c);
  return c;
}

}  // namespace tandem::cluster
