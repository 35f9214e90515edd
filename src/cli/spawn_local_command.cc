// `tandem spawn-local -- COMMAND...`: the one process of a TrainJob or
// PyTorchJob pod that asks for several processes per node without torchrun;
// starts them as torchrun would (src/launch/local_spawn.h) and supervises
// them (labelled output, the first failure or a signal ends them all, the
// exit code is the first failed process's). docs/contracts.md.
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "base/environment.h"
#include "cli/commands.h"
#include "launch/local_spawn.h"
#include "launch/process_supervisor.h"

namespace tandem::cli {

void RegisterSpawnLocalCommand(CLI::App& app, CommandBody* body) {
  auto command = std::make_shared<std::vector<std::string>>();
  auto* cmd = app.add_subcommand(
      "spawn-local",
      "Start this node's PET_NPROC_PER_NODE processes of a TrainJob or PyTorchJob as torchrun "
      "would (RANK, LOCAL_RANK, WORLD_SIZE, ...) and supervise them");
  cmd->add_option("command", *command, "The command every local process runs, after '--'")
      ->required();
  cmd->callback([body, command] {
    *body = [command] {
      const auto env = base::Environment::FromProcess().vars();
      const launch::LocalSpawnPlan plan = launch::ReadLocalSpawnPlan(env);
      auto specs = launch::LocalSpawnProcesses(plan, *command, env);
      launch::FindExecutable(specs[0].argv[0], specs[0].env);
      launch::ProcessSupervisor supervisor;
      std::string line = fmt::format("[spawn-local] {}\n", launch::DescribeLocalSpawnPlan(plan));
      std::fputs(line.c_str(), stderr);
      std::fflush(stderr);
      for (const auto& spec : specs) supervisor.Start(spec);
      return supervisor.Run().exit_code;
    };
  });
}

}  // namespace tandem::cli
