// Choosing the address a node announces to the others.
//
// Order: DMLC_NODE_HOST as given; else the address of DMLC_INTERFACE; else
// the local address of the route to the scheduler (what the kernel would
// use to reach it). The last rule is why a node never announces 127.0.1.1
// (Debian's /etc/hosts entry for the own host name) to a remote scheduler:
// nothing here looks the host name up.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "base/logger.h"
#include "cluster/dmlc_contract.h"

namespace tandem::cluster {

/// The IPv4 address of interface `name`, else its first global IPv6
/// address. Throws ConfigError naming the interface and the interfaces that
/// exist.
std::string InterfaceAddress(const std::string& name);

/// Resolves `host` (retrying with backoff until `timeout`: under Kubernetes
/// a peer's DNS name appears only once it is ready) and returns the numeric
/// addresses it names. Throws Timeout naming the host and the resolver's
/// last error.
std::vector<std::string> ResolveHost(const std::string& host, std::chrono::milliseconds timeout,
                                     const base::Logger& log);

/// The local address the kernel would use to send to host:port. Throws
/// Timeout (unresolvable) or IoError (no route).
std::string RouteSourceAddress(const std::string& host, uint16_t port,
                               std::chrono::milliseconds timeout, const base::Logger& log);

/// Applies the order above to `d`. Logs which rule chose the address.
std::string SelectNodeHost(const ProcessDescription& d, std::chrono::milliseconds timeout,
                           const base::Logger& log);

/// True when `host` is an IPv4 or IPv6 literal.
bool IsIpLiteral(const std::string& host);

}  // namespace tandem::cluster
