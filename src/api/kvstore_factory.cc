// KVStore::Create: picks the store for a type (docs/kvstore.md, "Types");
// a distributed store runs on the worker services of the process's node
// (cluster_handle.h).
#include <fmt/format.h>

#include "api/cluster_handle.h"
#include "base/environment.h"
#include "cluster/startup_environment.h"
#include "kv/dist_kvstore.h"
#include "kv/local_kvstore.h"
#include "tandem/error.h"
#include "tandem/kvstore.h"

namespace tandem {
namespace {

[[noreturn]] void ThrowUnknown(const std::string& type) {
  throw InvalidArgument(
      fmt::format("unknown kvstore type '{}' (expected local, device, dist_sync, dist_async, "
                  "dist_sync_device or dist_async_device)",
                  type));
}

}  // namespace

std::unique_ptr<KVStore> KVStore::Create(const std::string& type) {
  auto env = base::Environment::FromProcess();
  if (type == "local" || type == "device") {
    return std::make_unique<kv::LocalKVStore>(
        type, kv::StoreSettings::FromEnvironment(env),
        [](const std::string& name, const kv::OptimizerParams& params) {
          return kv::Optimizer::Create(name, params);
        });
  }
  if (!kv::IsDistributedType(type)) ThrowUnknown(type);
  // Whatever launcher started us: the role comes from the resolved contract,
  // checked before joining so that a server is told what to do instead.
  const base::Environment resolved(cluster::ResolveStartupEnvironment(env));
  const std::string role = resolved.GetString("DMLC_ROLE", "worker");
  if (role != "worker") {
    throw InvalidArgument(fmt::format(
        "KVStore::Create(\"{}\") in a {} process: only workers create a store; a server or "
        "scheduler hands its role to tandem with tandem::ServeAssignedRole()",
        type, role));
  }
  auto cluster = Cluster::Join(env.vars());
  return Create(type, *cluster);  // the store's own handle keeps the node
}

std::unique_ptr<KVStore> KVStore::Create(const std::string& type, Cluster& cluster) {
  if (!kv::IsDistributedType(type)) {
    if (type == "local" || type == "device") {
      throw InvalidArgument(fmt::format(
          "kvstore '{}' is not distributed: create it with KVStore::Create(\"{}\"), without a "
          "cluster",
          type, type));
    }
    ThrowUnknown(type);
  }
  api::WorkerServices& worker =
      api::ClusterAccess::Worker(cluster, fmt::format("KVStore::Create(\"{}\")", type));
  auto membership = api::ClusterAccess::Share(cluster);
  kv::KvClient& client = worker.OpenStore(type);
  const base::Environment& env = client.services().env;
  return std::make_unique<kv::DistKVStore>(type, client, kv::StoreSettings::FromEnvironment(env),
                                           std::move(membership));
}

}  // namespace tandem
