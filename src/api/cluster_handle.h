// What a tandem::Cluster handle holds (include/tandem/cluster.h): a claim on
// the process's node and, on a worker, the services the program may open on
// it (worker_services.h). KVStore::Create and Collectives::Open give each
// store and the collectives a handle of their own on the same node, so the
// node leaves the job once all of them did (cluster/node.h, "Hold").
#pragma once

#include <map>
#include <memory>
#include <string>

#include "api/worker_services.h"
#include "cluster/node.h"
#include "tandem/cluster.h"

namespace tandem {

struct Cluster::Impl {
  std::unique_ptr<cluster::Node::Hold> hold;
  std::shared_ptr<api::WorkerServices> worker;  // null unless a worker
};

namespace api {

/// Cluster's friend (tandem/cluster.h): makes and reads handles.
struct ClusterAccess {
  /// Assembles the node `env` describes, with the worker services on a
  /// worker, joins, and returns the first handle on it. Throws what
  /// Cluster::Join documents.
  static std::unique_ptr<Cluster> Join(const std::map<std::string, std::string>& env);
  /// A further handle (and claim) on the node of `cluster`.
  static std::unique_ptr<Cluster> Share(const Cluster& cluster);
  /// The worker services of `cluster`'s node. Throws InvalidArgument naming
  /// `what` and the node's role when it is not a worker.
  static WorkerServices& Worker(const Cluster& cluster, const std::string& what);
};

}  // namespace api
}  // namespace tandem
