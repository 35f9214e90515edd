// What the layers above cluster/ (the parameter server in kv/, the
// collectives in collective/) use of a process that joins a job: its
// transport and dispatcher, its configuration and logger, and its
// membership (node table, barriers, failure news).
//
// A service registers its message handlers between the node's assembly and
// its Join() (cluster/node.h), after this node listens and before it
// registers with the scheduler: no peer learns this node's address before
// its services can take messages (a message of an unregistered type would
// close the connection).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "base/clock.h"
#include "base/config.h"
#include "base/environment.h"
#include "base/logger.h"
#include "base/stats.h"
#include "base/timeline.h"
#include "cluster/membership.h"
#include "net/message_dispatcher.h"
#include "net/metered_transport.h"
#include "net/transport.h"
#include "tandem/cluster.h"

namespace tandem::cluster {

/// Borrowed references into a Node (cluster/node.h); valid while it lives.
struct NodeServices {
  const base::Environment& env;
  const base::Config& config;
  base::Logger& log;
  const base::Clock& clock;
  net::Transport& transport;
  net::MessageDispatcher& dispatcher;
  /// table() and self() are valid only once the join completed.
  Membership& membership;
  /// This process's metrics (docs/metrics.md): a service asks once for what
  /// it updates. The labels role and rank are added once the join completed.
  base::StatsRegistry& stats;
  /// The communication trace (TANDEM_TIMELINE), or null when off.
  base::Timeline* timeline = nullptr;
  /// The counters of what `transport` carries; a service that moves bytes
  /// past it (the collectives' same-host mailbox) counts them here too.
  /// Null where nothing is counted (in-process test jobs).
  net::TrafficMeter* traffic = nullptr;
};

/// Sets a service up on a node that listens and has not registered yet.
using ServiceSetup = std::function<void(NodeServices&)>;

}  // namespace tandem::cluster
