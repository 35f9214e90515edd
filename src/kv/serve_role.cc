// The scheduler and server roles (docs/kvstore.md, "Server").
#include "kv/serve_role.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "base/environment.h"
#include "base/exit_code.h"
#include "cluster/node.h"
#include "cluster/startup_environment.h"
#include "kv/kv_server.h"
#include "tandem/error.h"

namespace tandem::kv {

int RunRole(Role role, std::map<std::string, std::string> env) {
  const std::string name(RoleName(role));
  try {
    if (role == Role::kWorker) throw InvalidArgument("RunRole serves a scheduler or a server");
    auto it = env.find("DMLC_ROLE");
    if (it != env.end() && !it->second.empty() && it->second != name) {
      throw ConfigError(fmt::format("`tandem {}` started with DMLC_ROLE={}", name, it->second));
    }
    env["DMLC_ROLE"] = name;
    if (role == Role::kScheduler) {
      auto node = cluster::JoinNode(base::Environment(env), nullptr);
      node->Finalize();
      return 0;
    }
    auto options = KvServer::Options::FromEnvironment(base::Environment(env));
    std::unique_ptr<KvServer> server;
    auto node = cluster::JoinNode(base::Environment(env), [&](cluster::NodeServices& s) {
      server = std::make_unique<KvServer>(s, options);
    });
    server->Start();
    const auto wall0 = std::chrono::steady_clock::now();
    // The server works on its shard threads until every node leaves. After a
    // failure requests may still be in flight: the shards stop before the
    // cluster (transport, logger) they answer through goes.
    try {
      node->Finalize();
    } catch (...) {
      server->Stop();
      throw;
    }
    server->Stop();
    // What the server cost, for benchmarks and capacity planning.
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    const double cpu = double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                       double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    node->log().Info(
        "server cpu time {:.2f} s over {:.2f} s serving ({:.2f} cores on average, {} shard "
        "threads)",
        cpu, wall, wall > 0 ? cpu / wall : 0.0, options.threads);
    node.reset();  // stops the transport before the server goes
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem %s (pid %d): error: %s\n", name.c_str(), getpid(), e.what());
    return base::ExitCodeFor(e);
  }
}

}  // namespace tandem::kv

namespace tandem {

std::optional<int> ServeAssignedRole() {
  // The role comes from whatever contract started the process
  // (startup_environment.h).
  base::Environment env(cluster::ResolveStartupEnvironment(base::Environment::FromProcess()));
  auto role = env.GetString("DMLC_ROLE", "");
  if (role == "scheduler") return kv::RunRole(Role::kScheduler, env.vars());
  if (role == "server") return kv::RunRole(Role::kServer, env.vars());
  return std::nullopt;
}

}  // namespace tandem
