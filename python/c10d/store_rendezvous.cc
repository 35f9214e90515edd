#include "store_rendezvous.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

#include "cluster/node_address.h"
#include "cluster/startup_environment.h"
#include "launch/job_credentials.h"
#include "launch/local_launcher.h"
#include "net/endpoint.h"
#include "tandem/error.h"

namespace tandem::c10d_backend {
namespace {

constexpr const char* kCoordinatorKey = "tandem/coordinator";
constexpr const char* kSecretKey = "tandem/secret";

std::string HostKey(int rank) { return fmt::format("tandem/host/{}", rank); }

std::string OwnHostName() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

std::string Get(const std::map<std::string, std::string>& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

// store.get, with what this rank waited for added to the store's error.
std::string StoreGet(::c10d::Store& store, const std::string& key, int rank, const char* what) {
  try {
    std::vector<uint8_t> v = store.get(key);
    return {v.begin(), v.end()};
  } catch (const std::exception& e) {
    throw Timeout(fmt::format(
        "rank {} of the tandem process group waited for {} (store key '{}') and the store "
        "gave up: {}",
        rank, what, key, e.what()));
  }
}

}  // namespace

std::string ChooseCoordinatorHost(const std::map<std::string, std::string>& env,
                                  const std::vector<std::string>& hosts, bool default_group) {
  if (std::string host = Get(env, "DMLC_NODE_HOST"); !host.empty()) return host;
  if (std::string iface = Get(env, "DMLC_INTERFACE"); !iface.empty()) {
    return cluster::InterfaceAddress(iface);
  }
  if (!hosts.empty() &&
      std::all_of(hosts.begin(), hosts.end(), [&](const auto& h) { return h == hosts[0]; })) {
    return "127.0.0.1";
  }
  if (std::string master = Get(env, "MASTER_ADDR"); default_group && !master.empty()) {
    return master;
  }
  return OwnHostName();
}

std::map<std::string, std::string> WorldEnvironment(std::map<std::string, std::string> env,
                                                    int rank, int size,
                                                    const WorldRendezvous& agreed) {
  for (const char* name :
       {"DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_WORKER", "DMLC_NUM_SERVER",
        "DMLC_WORKER_ID", "DMLC_SERVER_ID", "MX_CONFIG", "TANDEM_ROLE", "TANDEM_NUM_SERVERS",
        "TANDEM_RENDEZVOUS_IN_PROCESS", cluster::kResolvedContractVariable, "TANDEM_LOCAL_RANK",
        "TANDEM_LOCAL_SIZE", "TANDEM_NODE_RANK", "TANDEM_NODE_COUNT"}) {
    env.erase(name);
  }
  env["TANDEM_WORLD_SIZE"] = std::to_string(size);
  env["TANDEM_RANK"] = std::to_string(rank);
  env["TANDEM_COORDINATOR"] = agreed.coordinator;
  if (!agreed.secret.empty()) env["TANDEM_SECRET"] = agreed.secret;
  return env;
}

WorldRendezvous ExchangeCoordinator(::c10d::Store& store, int rank, int size,
                                    const std::map<std::string, std::string>& env,
                                    bool default_group) {
  const bool own_secret = !Get(env, "TANDEM_SECRET").empty();
  store.set(HostKey(rank), Bytes(OwnHostName()));
  WorldRendezvous agreed;
  if (rank != 0) {
    agreed.coordinator = StoreGet(store, kCoordinatorKey, rank, "rank 0's rendezvous address");
    if (!own_secret) agreed.secret = StoreGet(store, kSecretKey, rank, "rank 0's job secret");
    return agreed;
  }
  std::vector<std::string> hosts;
  hosts.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    hosts.push_back(StoreGet(store, HostKey(r), rank, "every rank's host name"));
  }
  // A port free here a moment ago, drawn outside the ephemeral range: the
  // rendezvous binds it moments later, and a port the kernel picked (bind to
  // port 0) is one an outgoing connection can take meanwhile, even another
  // rank's connect to this very address (a TCP self-connect: rank 0 then
  // failed with "Address already in use" and the others with a closed
  // connection).
  net::Endpoint ep{ChooseCoordinatorHost(env, hosts, default_group), launch::RandomSchedulerPort()};
  agreed.coordinator = ep.ToString();
  // The secret first: a rank that read the address finds the secret set.
  agreed.secret = own_secret ? std::string() : launch::GenerateJobSecret();
  store.set(kSecretKey, Bytes(agreed.secret));
  store.set(kCoordinatorKey, Bytes(agreed.coordinator));
  return agreed;
}

}  // namespace tandem::c10d_backend
