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

}  // namespace tandem::cluster
