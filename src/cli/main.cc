// The `tandem` binary: parses the subcommand and runs it. Errors reach the
// user as one line on stderr and a non-zero exit code.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "base/exit_code.h"
#include "cli/commands.h"
#include "cli/usage_errors.h"
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
  app.add_subcommand("version", "Print tandem's version (as --version does)")->callback([&body] {
    body = [] {
      std::printf("tandem %s\n", TANDEM_VERSION);
      return 0;
    };
  });
  // -np N (horovodrun, mpirun) is --num-workers N for CLI11.
  const std::vector<std::string> spelt =
      tandem::cli::SpellLaunchArguments(std::vector<std::string>(argv, argv + argc));
  std::vector<char*> args;
  for (const auto& a : spelt) args.push_back(const_cast<char*>(a.c_str()));
  try {
    tandem::cli::CheckSubcommand(app, spelt);
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // docs/deploy.md: every command-line mistake exits 2, in one line.
    std::fprintf(stderr, "tandem: usage error: %s\n",
                 tandem::cli::DescribeUsageError(app, e, spelt).c_str());
    return 2;
  }
  try {
    return body ? body() : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: error: %s\n", e.what());
    return tandem::base::ExitCodeFor(e);  // docs/deploy.md: exit codes and restarts
  }
}
