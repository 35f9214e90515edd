// KVStore::Create: picks the store for a type (docs/kvstore.md, "Types").
#include <fmt/format.h>

#include "base/environment.h"
#include "kv/dist_kvstore.h"
#include "kv/local_kvstore.h"
#include "tandem/error.h"
#include "tandem/kvstore.h"

namespace tandem {

std::unique_ptr<KVStore> KVStore::Create(const std::string& type) {
  auto env = base::Environment::FromProcess();
  if (type == "local" || type == "device") {
    return std::make_unique<kv::LocalKVStore>(
        type, kv::StoreSettings::FromEnvironment(env),
        [](const std::string& name, const kv::OptimizerParams& params) {
          return kv::Optimizer::Create(name, params);
        });
  }
  if (type.starts_with("dist_")) return kv::DistKVStore::Join(type, env);
  throw InvalidArgument(
      fmt::format("unknown kvstore type '{}' (expected local, device, dist_sync, dist_async, "
                  "dist_sync_device or dist_async_device)",
                  type));
}

}  // namespace tandem
