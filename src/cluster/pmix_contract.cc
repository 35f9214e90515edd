// docs/contracts.md, "PMIx".
#include "cluster/pmix_contract.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <memory>

#include "base/config.h"
#include "cluster/mpi_coordinator.h"
#include "cluster/node_address.h"
#include "net/endpoint.h"
#include "net/socket_address.h"

#ifdef TANDEM_HAVE_PMIX
#include "cluster/pmix_client.h"
#endif

namespace tandem::cluster {
namespace {

// The coordinator this process learned in an earlier exchange of namespace
// `nspace`: "<namespace> <host:port>". A value of another namespace (a
// parent's, inherited) is not this job's.
std::optional<std::pair<std::string, uint16_t>> Remembered(const base::Environment& env,
                                                           const std::string& nspace) {
  auto memo = env.Get(kPmixCoordinatorMemoVariable);
  if (!memo) return std::nullopt;
  auto space = memo->find(' ');
  if (space == std::string::npos || memo->substr(0, space) != nspace) return std::nullopt;
  return ParseCoordinator(kPmixCoordinatorMemoVariable, memo->substr(space + 1));
}

// Rank 0: its address, and a port the kernel finds free there (bound and
// released at once; the rendezvous binds it again moments later, with
// SO_REUSEADDR).
net::Endpoint ChooseRank0Endpoint(const PmixJobFacts& facts, const base::Environment& env) {
  net::Endpoint ep{PmixCoordinatorHost(facts, env), 0};
  net::Endpoint bound;
  net::ListenOn({IsIpLiteral(ep.host) ? ep.host : "0.0.0.0", 0}, &bound);
  ep.port = bound.port;
  return ep;
}

std::unique_ptr<PmixSession> ConnectToPmixServer(const base::Environment& env) {
#ifdef TANDEM_HAVE_PMIX
  try {
    return std::make_unique<PmixClient>();
  } catch (const PmixUnavailable& e) {
    throw PmixUnavailable(fmt::format("{} (PMIX_NAMESPACE={}, PMIX_RANK={})", e.what(),
                                      env.GetString("PMIX_NAMESPACE", ""),
                                      env.GetString("PMIX_RANK", "")));
  }
#else
  (void)env;
  throw PmixUnavailable(
      "this tandem was built without libpmix (CMake found no pkg-config module `pmix`; Debian: "
      "libpmix-dev)");
#endif
}

}  // namespace

bool HasPmixMarkers(const base::Environment& env) {
  return env.Get("PMIX_RANK").has_value() && env.Get("PMIX_NAMESPACE").has_value();
}

LaunchContract PmixContractFromFacts(const PmixJobFacts& facts, const base::Environment& env) {
  LaunchContract c;
  c.name = "pmix";
  c.rank = facts.rank;
  c.world_size = facts.job_size;
  c.local_rank = facts.local_rank;
  c.local_size = facts.local_size;
  c.node_rank = facts.node_id;
  c.node_count = facts.num_nodes;
  FillCoordinatorFromEnvironment(env, c);
  ValidateLaunchContract(c);
  return c;
}

std::string PmixCoordinatorHost(const PmixJobFacts& facts, const base::Environment& env) {
  if (auto host = env.Get("DMLC_NODE_HOST"); host && !host->empty()) return *host;
  if (auto iface = env.Get("DMLC_INTERFACE"); iface && !iface->empty()) {
    return InterfaceAddress(*iface);
  }
  if (facts.num_nodes <= 1) return "127.0.0.1";
  if (facts.hostname.empty()) {
    throw ConfigError(fmt::format(
        "rank 0 of PMIx namespace {} runs on one of {} nodes, and the PMIx server gives no "
        "host name (PMIX_HOSTNAME) to publish as the rendezvous address: set DMLC_NODE_HOST or "
        "DMLC_INTERFACE on rank 0, or TANDEM_COORDINATOR on every rank",
        facts.nspace, facts.num_nodes));
  }
  return facts.hostname;
}

PmixContract CompletePmixContract(PmixSession& session, const base::Environment& env,
                                  std::chrono::milliseconds timeout) {
  const PmixJobFacts facts = session.Facts();
  PmixContract out{PmixContractFromFacts(facts, env), PmixCoordinatorSource::kAlone, facts.nspace};
  LaunchContract& c = out.contract;
  if (!c.coordinator_host.empty()) {
    out.source = PmixCoordinatorSource::kExplicit;
    return out;
  }
  if (c.world_size == 1) return out;
  if (auto memo = Remembered(env, facts.nspace)) {
    std::tie(c.coordinator_host, c.coordinator_port) = *memo;
    out.source = PmixCoordinatorSource::kRemembered;
    return out;
  }
  std::string value;
  if (c.rank == 0) {
    value = ChooseRank0Endpoint(facts, env).ToString();
    session.Publish(kPmixCoordinatorKey, value);
  }
  session.Fence(timeout);
  if (c.rank != 0) value = session.Lookup(0, kPmixCoordinatorKey, timeout);
  const std::string what =
      fmt::format("PMIx key {} of rank 0 in namespace {}", kPmixCoordinatorKey, facts.nspace);
  std::tie(c.coordinator_host, c.coordinator_port) = ParseCoordinator(what, value);
  if (c.coordinator_port == 0) {
    throw ConfigError(fmt::format("{}='{}' names no port", what, value));
  }
  out.source = PmixCoordinatorSource::kExchanged;
  return out;
}

std::optional<LaunchContract> ReadPmixContract(const base::Environment& env) {
  if (!HasPmixMarkers(env)) return std::nullopt;
  const auto timeout = base::Config::FromEnvironment(env).start_timeout;
  std::unique_ptr<PmixSession> session = ConnectToPmixServer(env);
  PmixContract done = CompletePmixContract(*session, env, timeout);
  // Disconnected first: libpmix's progress thread ends with the session,
  // and nothing else of tandem runs yet to read the environment meanwhile.
  session.reset();
  if (done.source == PmixCoordinatorSource::kExchanged) {
    const std::string memo = fmt::format(
        "{} {}", done.nspace,
        net::Endpoint{done.contract.coordinator_host, done.contract.coordinator_port}.ToString());
    ::setenv(kPmixCoordinatorMemoVariable, memo.c_str(), 1);
  }
  return done.contract;
}

}  // namespace tandem::cluster
