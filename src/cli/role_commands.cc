// `tandem scheduler` and `tandem server`: the built-in non-worker roles.
//
// Both read the DMLC contract from the environment (as `tandem launch`,
// MXNet's launch.py and Kubeflow's MXJob set it), join the job and stay until
// it ends; a server runs tandem's parameter server (src/kv/serve_role.h).
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "base/environment.h"
#include "base/exit_code.h"
#include "cli/commands.h"
#include "kv/serve_role.h"
#include "tandem/cluster.h"
#include "tandem/error.h"

namespace tandem::cli {
namespace {

int RunRole(Role role) { return kv::RunRole(role, base::Environment::FromProcess().vars()); }

}  // namespace

void RegisterRoleCommands(CLI::App& app, CommandBody* body) {
  auto* scheduler = app.add_subcommand(
      "scheduler", "Run the job's scheduler (reads DMLC_PS_ROOT_URI/PORT, DMLC_NUM_*)");
  scheduler->callback([body] { *body = [] { return RunRole(Role::kScheduler); }; });
  auto* server =
      app.add_subcommand("server", "Run a parameter server of the job (reads the DMLC_* contract)");
  server->callback([body] { *body = [] { return RunRole(Role::kServer); }; });
}

}  // namespace tandem::cli
