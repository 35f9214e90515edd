// A plain Kubernetes Indexed Job with a headless Service:
//   JOB_COMPLETION_INDEX   the pod's index (its rank)
//   WORLD_SIZE             the completions count, which the manifest injects
//                          (Kubernetes itself does not)
//   HOSTNAME               "<job>-<index>": the pod of index 0 is "<job>-0"
// The coordinator is TANDEM_COORDINATOR or MASTER_ADDR[/MASTER_PORT] when
// the manifest sets them (`tandem k8s render` does), else "<job>-0" followed
// by ".<TANDEM_SUBDOMAIN>" when that is set (the headless Service's name, so
// the name resolves from every pod). The pod's DNS name appears only once it
// is ready; the connection retries with backoff (TANDEM_CONNECT_TIMEOUT).
#include <fmt/format.h>

#include "cluster/launch_contract.h"
#include "cluster/mpi_coordinator.h"
#include "tandem/error.h"

namespace tandem::cluster {

std::optional<LaunchContract> ReadIndexedJobContract(const base::Environment& env) {
  if (!env.Get("JOB_COMPLETION_INDEX")) return std::nullopt;
  LaunchContract c;
  c.name = "indexed-job";
  if (!env.Get("WORLD_SIZE")) {
    throw ConfigError(
        "Indexed Job (JOB_COMPLETION_INDEX is set) without WORLD_SIZE: the manifest must inject "
        "the number of completions as WORLD_SIZE");
  }
  c.world_size = static_cast<int>(env.GetInt("WORLD_SIZE", 1, 1, 1 << 20));
  c.rank = static_cast<int>(env.GetInt("JOB_COMPLETION_INDEX", 0, 0, c.world_size - 1));
  c.node_rank = c.rank;
  c.node_count = c.world_size;
  FillCoordinatorFromEnvironment(env, c);
  if (c.coordinator_host.empty()) {
    std::string host = env.GetString("HOSTNAME", "");
    std::string suffix = fmt::format("-{}", c.rank);
    if (host.size() <= suffix.size() ||
        host.compare(host.size() - suffix.size(), suffix.size(), suffix) != 0) {
      throw ConfigError(fmt::format(
          "Indexed Job: HOSTNAME='{}' does not end in '-{}' (JOB_COMPLETION_INDEX), so the pod of "
          "index 0 cannot be named; set TANDEM_COORDINATOR=host:port in the manifest",
          host, c.rank));
    }
    c.coordinator_host = host.substr(0, host.size() - suffix.size()) + "-0";
    if (auto sub = env.GetString("TANDEM_SUBDOMAIN", ""); !sub.empty()) {
      c.coordinator_host += "." + sub;
    }
    c.coordinator_port =
        static_cast<uint16_t>(env.GetInt("MASTER_PORT", kDefaultCoordinatorPort, 1, 65535));
  }
  ValidateLaunchContract(c);
  return c;
}

}  // namespace tandem::cluster
