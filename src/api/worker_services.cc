#include "api/worker_services.h"

#include <fmt/format.h>

#include "tandem/error.h"

namespace tandem::api {

WorkerServices::WorkerServices(const cluster::NodeServices& services)
    : store_(services, kv::KvClient::Options::FromEnvironment(services.env)),
      collectives_(services,
                   collective::CollectiveSettings::FromEnvironment(services.env, services.config)) {
}

WorkerServices::~WorkerServices() { CloseCollectives(); }

kv::KvClient& WorkerServices::OpenStore(const std::string& type) {
  std::lock_guard lock(mu_);
  if (!store_type_.empty()) {
    throw InvalidArgument(fmt::format(
        "kvstore '{}': this process opened a distributed store ('{}') on its node already; a "
        "worker has one distributed store for the life of the job",
        type, store_type_));
  }
  store_.Start();
  store_type_ = type;
  return store_;
}

collective::CollectiveService& WorkerServices::OpenCollectives() {
  std::lock_guard lock(mu_);
  if (collectives_opened_) {
    throw InvalidArgument(
        "the collectives of this process's node were opened already; a worker opens them once "
        "for the life of the job (share the Collectives object instead)");
  }
  collectives_opened_ = true;
  collectives_.Start();
  return collectives_;
}

void WorkerServices::CloseCollectives() { collectives_.StopWorld(); }

}  // namespace tandem::api
