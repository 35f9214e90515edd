// tandem::Cluster: a handle on the process's node (cluster/node.h); joining
// assembles the node with the worker services on a worker
// (worker_services.h).
#include "tandem/cluster.h"

#include <fmt/format.h>

#include "api/cluster_handle.h"
#include "base/environment.h"
#include "tandem/error.h"

namespace tandem {

Cluster::Cluster(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Cluster::~Cluster() = default;

std::unique_ptr<Cluster> Cluster::Join() { return Join(base::Environment::FromProcess().vars()); }

std::unique_ptr<Cluster> Cluster::Join(const std::map<std::string, std::string>& env) {
  return api::ClusterAccess::Join(env);
}

namespace api {

std::unique_ptr<Cluster> ClusterAccess::Join(const std::map<std::string, std::string>& env) {
  auto node = std::make_shared<cluster::Node>(base::Environment(env));
  auto impl = std::make_unique<Cluster::Impl>();
  if (node->role() == Role::kWorker) {
    auto worker = std::make_shared<WorkerServices>(node->Services());
    // The world communicator ends while the transport still runs; the
    // services go after the transport stopped calling them.
    WorkerServices* w = worker.get();
    node->Attach(worker, [w] { w->CloseCollectives(); });
    impl->worker = std::move(worker);
  }
  node->Join();
  impl->hold = cluster::Node::NewHold(node);
  return std::unique_ptr<Cluster>(new Cluster(std::move(impl)));
}

std::unique_ptr<Cluster> ClusterAccess::Share(const Cluster& cluster) {
  const Cluster::Impl& from = *cluster.impl_;
  auto impl = std::make_unique<Cluster::Impl>();
  impl->hold = cluster::Node::NewHold(from.hold->shared());
  impl->worker = from.worker;
  return std::unique_ptr<Cluster>(new Cluster(std::move(impl)));
}

WorkerServices& ClusterAccess::Worker(const Cluster& cluster, const std::string& what) {
  const Cluster::Impl& impl = *cluster.impl_;
  if (!impl.worker) {
    throw InvalidArgument(fmt::format(
        "{} in a {} process: only workers open stores and collectives; a server or scheduler "
        "hands its role to tandem with tandem::ServeAssignedRole()",
        what, RoleName(impl.hold->node().role())));
  }
  return *impl.worker;
}

}  // namespace api

Role Cluster::role() const { return impl_->hold->node().membership().self().role; }
int Cluster::rank() const { return impl_->hold->node().membership().self().rank; }
int Cluster::id() const { return impl_->hold->node().membership().self().id; }
int Cluster::num_workers() const { return impl_->hold->node().membership().num_workers(); }
std::vector<int> Cluster::workers() const { return impl_->hold->node().membership().workers(); }
uint32_t Cluster::epoch() const { return impl_->hold->node().membership().epoch(); }
bool Cluster::joined_running_job() const {
  return impl_->hold->node().membership().joined_running_job();
}
int Cluster::num_servers() const { return impl_->hold->node().membership().table().num_servers; }
const std::vector<NodeInfo>& Cluster::nodes() const {
  return impl_->hold->node().membership().table().nodes;
}
Members Cluster::Barrier(int groups) { return impl_->hold->node().membership().Barrier(groups); }
void Cluster::CheckHealth() const { impl_->hold->node().membership().CheckHealth(); }
void Cluster::RecordSpan(const std::string& track, const std::string& name,
                         std::chrono::steady_clock::time_point start,
                         std::chrono::steady_clock::time_point end) {
  if (base::Timeline* timeline = impl_->hold->node().Services().timeline) {
    timeline->Span(track, name, start, end);
  }
}
void Cluster::Finalize() { impl_->hold->Release(/*graceful=*/true); }

// ServeAssignedRole() is defined in src/kv/serve_role.cc: a server runs the
// parameter server on a node of its own.

}  // namespace tandem
