// `tandem rank-exec --servers S --workers W [...] -- COMMAND...`: run by
// mpirun or srun as every rank of `tandem launch --launcher mpi|slurm`
// (src/launch/rank_exec.h); not meant to be typed by hand. Becomes the
// job's process for this rank and supervises it, prefixing its output with
// its label, and exits with its status.
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "base/environment.h"
#include "cli/commands.h"
#include "launch/local_launcher.h"
#include "launch/process_supervisor.h"
#include "launch/rank_exec.h"
#include "launch/rank_timeline.h"

namespace tandem::cli {

void RegisterRankExecCommand(CLI::App& app, CommandBody* body) {
  struct Args {
    int servers = 0;
    int workers = 1;
    bool command_runs_all_roles = false;
    bool no_scheduler = false;
    bool loopback = false;
    std::vector<std::string> env;
    std::vector<std::string> command;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "rank-exec",
      "Run this rank's process of a `tandem launch --launcher mpi|slurm` job (started by mpirun "
      "or srun)");
  cmd->add_option("--servers", args->servers, "The job's servers")->required();
  cmd->add_option("--workers", args->workers, "The job's workers")->required();
  cmd->add_flag("--command-runs-all-roles", args->command_runs_all_roles,
                "The scheduler and servers run COMMAND too");
  cmd->add_flag("--no-scheduler", args->no_scheduler, "Collectives-only job: ranks are workers");
  cmd->add_flag("--loopback", args->loopback, "Every rank is on this host");
  cmd->add_option("--env", args->env, "NAME=VALUE for the process (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("command", args->command, "The workers' command, after '--'")->required();
  cmd->callback([body, args] {
    *body = [args] {
      launch::RankProcessOptions o;
      o.job.num_servers = args->servers;
      o.job.num_workers = args->workers;
      o.job.command = args->command;
      o.job.command_runs_all_roles = args->command_runs_all_roles;
      o.job.rendezvous_in_worker = args->no_scheduler;
      o.job.tandem_binary = launch::CurrentExecutablePath();
      for (const auto& e : args->env) o.job.env.push_back(launch::ParseEnvAssignment(e));
      o.loopback = args->loopback;
      launch::StopWithParent();
      const auto env = base::Environment::FromProcess().vars();
      launch::ProcessSpec spec = launch::RankProcess(o, env);
      spec.host = launch::RankHostName(env);
      launch::FindExecutable(spec.argv[0], spec.env);
      // Its lines are "[rank-exec] ...": the launcher on top (`tandem launch
      // --launcher mpi|slurm`) reads "[rank-exec] job failed: ..." to name
      // the first failed rank and host.
      launch::SupervisorOptions options;
      options.log_tag = std::string(launch::kRankExecLogTag);
      options.end_adopted_orphans = true;
      options.stamp_first_failure = true;
      launch::ProcessSupervisor supervisor(options);
      const pid_t pid = supervisor.Start(spec);
      const int code = supervisor.Run().exit_code;
      // PATH.<pid> becomes PATH.<label>, which the launcher merges.
      launch::KeepRankTimeline(spec.env, "", pid, spec.label);
      return code;
    };
  });
}

}  // namespace tandem::cli
