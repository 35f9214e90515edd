// `tandem scheduler` and `tandem server`: the built-in non-worker roles.
//
// Both read the DMLC contract from the environment (as `tandem launch`,
// MXNet's launch.py and Kubeflow's MXJob set it), join the job and stay until
// it ends. Until tandem's parameter server exists, a server only takes part
// in membership and barriers.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "base/environment.h"
#include "base/exit_code.h"
#include "cli/commands.h"
#include "tandem/cluster.h"
#include "tandem/error.h"

namespace tandem::cli {
namespace {

int RunRole(const char* role) {
  auto vars = base::Environment::FromProcess().vars();
  auto it = vars.find("DMLC_ROLE");
  if (it != vars.end() && !it->second.empty() && it->second != role) {
    throw ConfigError(fmt::format("`tandem {}` started with DMLC_ROLE={}", role, it->second));
  }
  vars["DMLC_ROLE"] = role;
  try {
    auto cluster = Cluster::Join(vars);
    cluster->Finalize();
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "tandem %s (pid %d): error: %s\n", role, getpid(), e.what());
    return base::ExitCodeFor(e);
  }
}

}  // namespace

void RegisterRoleCommands(CLI::App& app, CommandBody* body) {
  auto* scheduler = app.add_subcommand(
      "scheduler", "Run the job's scheduler (reads DMLC_PS_ROOT_URI/PORT, DMLC_NUM_*)");
  scheduler->callback([body] { *body = [] { return RunRole("scheduler"); }; });
  auto* server =
      app.add_subcommand("server", "Run a parameter server of the job (reads the DMLC_* contract)");
  server->callback([body] { *body = [] { return RunRole("server"); }; });
}

}  // namespace tandem::cli
