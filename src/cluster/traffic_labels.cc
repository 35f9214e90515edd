#include "cluster/traffic_labels.h"

#include <iterator>
#include <string_view>
#include <utility>

#include "net/send_queue_bound.h"
#include "net/wire_format.h"

namespace tandem::cluster {
namespace {

// The values of peer_role, in the order the series are created; a sender
// without a node id and a label outside the first three count as the last.
constexpr std::string_view kPeerRoles[] = {"scheduler", "server", "worker", "unknown"};
constexpr size_t kUnknownRole = 3;

// The values of service: the owners of the message type ranges.
constexpr std::string_view kServices[] = {"cluster", "kv", "collective", "other"};

size_t RoleIndex(const char* role) {
  for (size_t i = 0; i < kUnknownRole; ++i) {
    if (std::string_view(role) == kPeerRoles[i]) return i;
  }
  return kUnknownRole;
}

size_t ServiceOf(uint16_t type) {
  if (type >= net::msgtype::kClusterFirst && type < net::msgtype::kKvFirst) return 0;
  if (type >= net::msgtype::kKvFirst && type < net::msgtype::kCollectiveFirst) return 1;
  if (type >= net::msgtype::kCollectiveFirst && type <= net::msgtype::kLast) return 2;
  return 3;
}

}  // namespace

net::TrafficLabels NodeTrafficLabels(std::function<const char*(int node_id)> role_label) {
  net::TrafficLabels labels;
  labels.peer_roles.assign(std::begin(kPeerRoles), std::end(kPeerRoles));
  labels.peer_role_of = [role_label = std::move(role_label)](int node_id) {
    return node_id < 0 ? kUnknownRole : RoleIndex(role_label(node_id));
  };
  labels.services.assign(std::begin(kServices), std::end(kServices));
  labels.service_of = ServiceOf;
  return labels;
}

}  // namespace tandem::cluster
