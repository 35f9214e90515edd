// The labels a node counts its traffic and send queues by (docs/metrics.md):
// peer_role, the role of the peer node ("scheduler", "server", "worker", or
// "unknown" for a sender without a node id yet and an id outside the job),
// and service, the layer that owns the message type ("cluster" 64..127,
// "kv" 128..191, "collective" 192..255, "other" for the net layer's own
// types; net/wire_format.h). The net layer counts by them without knowing
// what they mean (net/metered_transport.h).
#pragma once

#include <functional>

#include "net/metered_transport.h"

namespace tandem::cluster {

/// The labels of a node whose peers' roles `role_label` names: it returns
/// "scheduler", "server" or "worker" for a node id of the job (any other
/// text counts as "unknown") and is called on transport threads, for ids
/// >= 0 only.
net::TrafficLabels NodeTrafficLabels(std::function<const char*(int node_id)> role_label);

}  // namespace tandem::cluster
