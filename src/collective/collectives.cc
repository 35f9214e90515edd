// tandem::Collectives: joins the job with the collective service's handlers
// registered in the setup hook, then forms the mesh.
#include <fmt/format.h>

#include "base/environment.h"
#include "collective/collective_service.h"
#include "tandem/collective.h"
#include "tandem/error.h"

namespace tandem {

struct Collectives::Impl {
  // Destruction order matters: communicators first (StopWorld in ~Impl),
  // then the cluster (its transport stops calling the mesh), then the
  // service that owns the mesh.
  std::unique_ptr<collective::CollectiveService> service;
  std::unique_ptr<Cluster> cluster;

  ~Impl() {
    if (service) service->StopWorld();
    cluster.reset();
    service.reset();
  }
};

Collectives::Collectives(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Collectives::~Collectives() = default;

std::unique_ptr<Collectives> Collectives::Join() {
  return Join(base::Environment::FromProcess().vars());
}

std::unique_ptr<Collectives> Collectives::Join(const std::map<std::string, std::string>& env) {
  auto impl = std::make_unique<Impl>();
  collective::CollectiveService* service = nullptr;
  impl->cluster = cluster::JoinWithServices(env, [&](cluster::NodeServices& s) {
    impl->service = std::make_unique<collective::CollectiveService>(
        s, collective::CollectiveSettings::FromEnvironment(s.env, s.config));
    service = impl->service.get();
  });
  service->Start();
  return std::unique_ptr<Collectives>(new Collectives(std::move(impl)));
}

Cluster& Collectives::cluster() { return *impl_->cluster; }
Communicator& Collectives::world() { return impl_->service->World(); }

std::unique_ptr<Communicator> Collectives::NewGroup(const std::vector<int>& world_ranks) {
  return impl_->service->NewGroup(world_ranks);
}

void Collectives::Finalize() {
  impl_->service->World().Barrier({"finalize", {}});
  impl_->cluster->Finalize();
}

}  // namespace tandem
