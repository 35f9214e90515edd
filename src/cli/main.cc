// The `tandem` binary: parses the subcommand and runs it. Errors reach the
// user as one line on stderr and a non-zero exit code.
#include <cstdio>
#include <exception>

#include "base/exit_code.h"
#include "cli/commands.h"
#include "tandem/error.h"

int main(int argc, char** argv) {
  CLI::App app{"tandem: distributed training runtime (parameter server and collectives)"};
  app.set_version_flag("--version", std::string("tandem ") + TANDEM_VERSION);
  app.require_subcommand(1);
  tandem::cli::CommandBody body;
  tandem::cli::RegisterLaunchCommand(app, &body);
  tandem::cli::RegisterRoleCommands(app, &body);
  tandem::cli::RegisterK8sCommand(app, &body);
  tandem::cli::RegisterRemoteExecCommand(app, &body);
  tandem::cli::RegisterBenchCommand(app, &body);
  tandem::cli::RegisterRankExecCommand(app, &body);
  tandem::cli::RegisterTimelineCommand(app, &body);
  tandem::cli::RegisterSpawnLocalCommand(app, &body);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return body ? body() : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: error: %s\n", e.what());
    return tandem::base::ExitCodeFor(e);  // docs/deploy.md: exit codes and restarts
  }
}
