// `tandem remote-exec [--cwd DIR] [--label L] -- COMMAND...`: run by the ssh
// launcher on each remote host, and by the sge launcher as each task of the
// Grid Engine job (src/launch/remote_exec.h); not meant to be
// typed by hand. Reads the process's environment from stdin, runs COMMAND,
// and stops it when stdin closes.
#include <unistd.h>

#include <cstdio>

#include "base/environment.h"
#include "cli/commands.h"
#include "launch/remote_exec.h"
#include "tandem/error.h"

namespace tandem::cli {

void RegisterRemoteExecCommand(CLI::App& app, CommandBody* body) {
  struct Args {
    std::string cwd;
    std::string label = "process";
    double grace_seconds = 3;
    std::vector<std::string> command;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "remote-exec",
      "Run one process of a job on this host for `tandem launch --launcher ssh|sge` (reads its "
      "environment from stdin; stops it when stdin closes)");
  cmd->add_option("--cwd", args->cwd, "Directory to run the command in");
  cmd->add_option("--label", args->label, "The process's label, for messages");
  cmd->add_option("--grace", args->grace_seconds, "Seconds between SIGTERM and SIGKILL")
      ->capture_default_str();
  cmd->add_option("command", args->command, "The command, after '--'")->required();
  cmd->callback([body, args] {
    *body = [args] {
      try {
        launch::RemoteExecOptions o;
        o.command = args->command;
        o.working_directory = args->cwd;
        o.label = args->label;
        o.grace = std::chrono::milliseconds(static_cast<int64_t>(args->grace_seconds * 1000));
        o.environment = base::Environment::FromProcess().vars();
        for (auto& [k, v] : launch::ReadRemoteEnvironment(STDIN_FILENO, std::chrono::seconds(60))) {
          o.environment[k] = v;
        }
        o.watch_fd = STDIN_FILENO;
        return launch::RunRemoteExec(o);
      } catch (const Error& e) {
        std::fprintf(stderr, "tandem remote-exec (%s, host pid %d): error: %s\n",
                     args->label.c_str(), getpid(), e.what());
        return 127;
      }
    };
  });
}

}  // namespace tandem::cli
