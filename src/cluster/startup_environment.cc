#include "cluster/startup_environment.h"

#include <fmt/format.h>

#include "cluster/contract_detection.h"
#include "cluster/pmix_contract.h"
#include "tandem/error.h"

namespace tandem::cluster {
namespace {

// The servers of a job whose contract names no roles: TANDEM_NUM_SERVERS,
// else DMLC_NUM_SERVER, else none.
int ServersOfPeers(const base::Environment& env, const LaunchContract& c) {
  const char* var = env.Get("TANDEM_NUM_SERVERS") ? "TANDEM_NUM_SERVERS" : "DMLC_NUM_SERVER";
  if (c.num_servers) {
    // The contract names its servers (TF_CONFIG's ps tasks); a variable may
    // only agree.
    if (env.Get(var) && env.GetInt(var, 0, 0, 1 << 16) != *c.num_servers) {
      throw ConfigError(fmt::format("{}={} but the {} contract names {} servers", var,
                                    env.GetString(var, ""), c.name, *c.num_servers));
    }
    return *c.num_servers;
  }
  int servers = static_cast<int>(env.GetInt(var, 0, 0, 1 << 16));
  if (servers >= c.world_size) {
    throw ConfigError(fmt::format(
        "{}={} leaves no worker among the {} processes of the {} job: the first world size minus "
        "{} ranks are workers, the rest servers",
        var, servers, c.world_size, c.name, var));
  }
  return servers;
}

// Where the rendezvous (or the scheduler) listens. TANDEM_COORDINATOR beats
// what the contract inferred; under torchrun the agent's store holds
// MASTER_PORT, so tandem takes the port above it.
void ChooseCoordinator(const base::Environment& env, LaunchContract& c, std::string& note) {
  if (auto t = env.Get("TANDEM_COORDINATOR"); t && c.name != "tandem") {
    std::tie(c.coordinator_host, c.coordinator_port) = ParseCoordinator("TANDEM_COORDINATOR", *t);
    if (c.coordinator_port == 0) c.coordinator_port = kDefaultCoordinatorPort;
    note = " (TANDEM_COORDINATOR)";
    return;
  }
  if (c.name == "torchrun" && env.GetBool("TORCHELASTIC_USE_AGENT_STORE", false)) {
    if (c.coordinator_port == 65535) {
      throw ConfigError(
          "torchrun's agent store holds MASTER_PORT=65535 and tandem's rendezvous takes the port "
          "above it: set MASTER_PORT lower, or TANDEM_COORDINATOR");
    }
    ++c.coordinator_port;
    note = " (MASTER_PORT + 1: torchrun's agent store holds MASTER_PORT)";
  }
  if (c.name == "pmix" && c.world_size > 1 && env.GetString("MASTER_ADDR", "").empty()) {
    note = fmt::format(" (rank 0's, through PMIx key {})", kPmixCoordinatorKey);
  }
  if (!c.coordinator_host.empty() && c.coordinator_port == 0) {
    c.coordinator_port = kDefaultCoordinatorPort;
  }
}

}  // namespace

std::map<std::string, std::string> ResolveStartupEnvironment(const base::Environment& env) {
  auto vars = env.vars();
  if (vars.count(kResolvedContractVariable)) return vars;
  DetectedContract d = DetectContract(env);
  if (d.dmlc) {
    vars[kResolvedContractVariable] = d.ToString();
    return vars;
  }
  LaunchContract c = *d.peers;
  std::string coordinator_note;
  ChooseCoordinator(env, c, coordinator_note);
  for (const char* v :
       {"DMLC_ROLE", "DMLC_WORKER_ID", "DMLC_SERVER_ID", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT",
        "DMLC_NUM_WORKER", "DMLC_NUM_SERVER", "TANDEM_RENDEZVOUS_IN_PROCESS"}) {
    vars.erase(v);
  }
  std::string mapped;
  if (c.role) {
    // A contract with roles (Volcano tasks named scheduler/server/worker,
    // TANDEM_ROLE): a scheduler process at the coordinator, as DMLC's.
    int servers = c.num_servers ? *c.num_servers
                                : static_cast<int>(env.GetInt("TANDEM_NUM_SERVERS", 0, 0, 1 << 16));
    int workers = 0;
    if (c.num_workers) {
      workers = *c.num_workers;
    } else if (env.Get("TANDEM_NUM_WORKERS")) {
      workers = static_cast<int>(env.GetInt("TANDEM_NUM_WORKERS", 1, 1, 1 << 16));
    } else {
      throw ConfigError(fmt::format(
          "{} names this process's role ({}) but not the job's workers: set TANDEM_NUM_WORKERS "
          "(and TANDEM_NUM_SERVERS)",
          c.name, RoleName(*c.role)));
    }
    if (workers < 1) {
      throw ConfigError(fmt::format("{}: a job with roles needs at least one worker", c.name));
    }
    if (c.coordinator_host.empty()) {
      throw ConfigError(
          fmt::format("{} names this process's role ({}) but not the scheduler's address: set "
                      "TANDEM_COORDINATOR=host:port",
                      c.name, RoleName(*c.role)));
    }
    int limit = *c.role == Role::kWorker ? workers : *c.role == Role::kServer ? servers : 1;
    if (c.rank >= limit) {
      throw ConfigError(fmt::format("{}: {} rank {} but the job has {} {}s", c.name,
                                    RoleName(*c.role), c.rank, limit, RoleName(*c.role)));
    }
    vars["DMLC_ROLE"] = std::string(RoleName(*c.role));
    if (*c.role == Role::kWorker) vars["DMLC_WORKER_ID"] = std::to_string(c.rank);
    if (*c.role == Role::kServer) vars["DMLC_SERVER_ID"] = std::to_string(c.rank);
    vars["DMLC_NUM_SERVER"] = std::to_string(servers);
    vars["DMLC_NUM_WORKER"] = std::to_string(workers);
    mapped = fmt::format("{} {}; scheduler at {}:{}{}, {} servers, {} workers", RoleName(*c.role),
                         c.rank, c.coordinator_host, c.coordinator_port, coordinator_note, servers,
                         workers);
  } else {
    // Peers: the first world size minus S ranks are workers (worker rank =
    // rank), the last S servers; worker 0 hosts the rendezvous in-process.
    int servers = ServersOfPeers(env, c);
    int workers = c.world_size - servers;
    if (c.coordinator_host.empty()) {
      if (c.world_size > 1) {
        throw ConfigError(
            fmt::format("{} gives rank {} of {} but no rendezvous address for rank 0: set "
                        "TANDEM_COORDINATOR=host:port (or MASTER_ADDR and MASTER_PORT)",
                        c.name, c.rank, c.world_size));
      }
      // A process on its own: its in-process rendezvous takes any free
      // loopback port (dmlc_contract.cc allows port 0 for exactly this).
      c.coordinator_host = "127.0.0.1";
      c.coordinator_port = 0;
    }
    Role role = c.rank < workers ? Role::kWorker : Role::kServer;
    int role_rank = role == Role::kWorker ? c.rank : c.rank - workers;
    vars["DMLC_ROLE"] = std::string(RoleName(role));
    vars[role == Role::kWorker ? "DMLC_WORKER_ID" : "DMLC_SERVER_ID"] = std::to_string(role_rank);
    vars["DMLC_NUM_SERVER"] = std::to_string(servers);
    vars["DMLC_NUM_WORKER"] = std::to_string(workers);
    vars["TANDEM_RENDEZVOUS_IN_PROCESS"] = "1";
    mapped =
        fmt::format("{} {} of {} workers and {} servers; worker 0 hosts the rendezvous at {}:{}{}",
                    RoleName(role), role_rank, workers, servers, c.coordinator_host,
                    c.coordinator_port, coordinator_note);
  }
  vars["DMLC_PS_ROOT_URI"] = c.coordinator_host;
  vars["DMLC_PS_ROOT_PORT"] = std::to_string(c.coordinator_port);
  d.peers = c;
  vars[kResolvedContractVariable] = fmt::format("{} -> {}", d.ToString(), mapped);
  return vars;
}

}  // namespace tandem::cluster
