// tandem::Collectives: the collective service of the process's node
// (worker_services.h), opened once on a joined node.
#include <fmt/format.h>

#include "api/cluster_handle.h"
#include "base/environment.h"
#include "collective/collective_service.h"
#include "tandem/collective.h"
#include "tandem/error.h"

namespace tandem {

struct Collectives::Impl {
  std::unique_ptr<Cluster> cluster;  // this object's hold on the node
  api::WorkerServices* worker = nullptr;
  collective::CollectiveService* service = nullptr;

  // The world ends first, while the node's transport runs; the node (and
  // with it the service) goes with the last hold.
  ~Impl() {
    if (worker) worker->CloseCollectives();
  }
};

Collectives::Collectives(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Collectives::~Collectives() = default;

std::unique_ptr<Collectives> Collectives::Join() {
  return Join(base::Environment::FromProcess().vars());
}

std::unique_ptr<Collectives> Collectives::Join(const std::map<std::string, std::string>& env) {
  auto cluster = Cluster::Join(env);
  if (cluster->role() != Role::kWorker) {
    throw ConfigError(fmt::format("collectives run among workers; this process is {}",
                                  cluster->nodes()[static_cast<size_t>(cluster->id())].ToString()));
  }
  return Open(*cluster);  // the collectives' own handle keeps the node
}

std::unique_ptr<Collectives> Collectives::Open(Cluster& cluster) {
  api::WorkerServices& worker = api::ClusterAccess::Worker(cluster, "Collectives::Open");
  auto impl = std::make_unique<Impl>();
  impl->cluster = api::ClusterAccess::Share(cluster);
  impl->service = &worker.OpenCollectives();
  impl->worker = &worker;
  return std::unique_ptr<Collectives>(new Collectives(std::move(impl)));
}

Cluster& Collectives::cluster() { return *impl_->cluster; }
Communicator& Collectives::world() { return impl_->service->World(); }

std::unique_ptr<Communicator> Collectives::NewGroup(const std::vector<int>& world_ranks) {
  return impl_->service->NewGroup(world_ranks);
}

Members Collectives::Regroup() { return impl_->service->Regroup(); }

void Collectives::CheckJoins() { impl_->service->CheckJoins(); }

void Collectives::Finalize() {
  impl_->service->World().Barrier({"finalize", {}});
  impl_->worker->CloseCollectives();
  impl_->cluster->Finalize();
}

}  // namespace tandem
