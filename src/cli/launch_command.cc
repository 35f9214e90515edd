// `tandem launch`: starts a whole job and supervises it (src/launch/).
//
//   tandem launch -n WORKERS | -np WORKERS | --workers [MIN:]MAX
//                 | --nproc-per-node N [--nnodes M]
//                 [-s SERVERS] [--launcher local|ssh|mpi|slurm|sge]
//                 [-H HOST:SLOTS,... | --hostfile FILE] [--env K=V]...
//                 [--teardown-grace SECONDS] [--command-runs-all-roles]
//                 [--max-restarts N] [--restart-delay SECONDS]
//                 [--restart-policy exit-code|on-failure]
//                 [--elastic-timeout SECONDS]
//                 [--job-id ID] -- COMMAND [ARGS...]
//
// docs/launch.md is the user's description.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "base/environment.h"
#include "cli/commands.h"
#include "launch/elastic_workers.h"
#include "launch/hostfile.h"
#include "launch/launch_plan.h"
#include "launch/local_launcher.h"
#include "launch/mpi_launcher.h"
#include "launch/process_supervisor.h"
#include "launch/sge_launcher.h"
#include "launch/slurm_launcher.h"
#include "launch/ssh_launcher.h"
#include "tandem/error.h"

namespace tandem::cli {
namespace {

// What the command line says; filled by CLI11, read by the body.
struct LaunchArguments {
  int num_workers = 0;
  std::string workers;     // --workers N or MIN:MAX (elastic_workers.h)
  int nproc_per_node = 0;  // torchrun's --nproc-per-node
  int nnodes = 0;          // torchrun's --nnodes
  std::string hosts;       // -H host1:2,host2:2 (horovodrun, mpirun)
  int num_servers = 0;
  std::string launcher = "local";
  std::vector<std::string> env;
  bool autotune = false;     // horovodrun's --autotune
  std::string autotune_log;  // horovodrun's --autotune-log-file
  double teardown_grace_seconds = 10.0;
  std::string log_dir;
  bool command_runs_all_roles = false;
  bool no_scheduler = false;
  std::string job_id;
  std::vector<std::string> command;
  // whole-job restarts (src/launch/job_restarts.h)
  int max_restarts = 0;
  double restart_delay_seconds = 1.0;
  std::string restart_policy = "exit-code";
  // horovodrun's --elastic-timeout: how long an elastic job below MIN
  // waits for workers to join (TANDEM_ELASTIC_TIMEOUT)
  double elastic_timeout_seconds = 600.0;
  bool elastic_timeout_given = false;
  // --launcher ssh
  std::string hostfile;
  std::vector<std::string> ssh_args;
  std::string remote_tandem;
  std::string sync_dst_dir;
  std::vector<std::string> forward_env;
  int scheduler_port = 0;
  std::string host_discovery_script;  // horovodrun's --host-discovery-script
  double discovery_interval_seconds = 1.0;
  // --launcher mpi
  std::vector<std::string> mpi_args;
  // --launcher slurm
  std::vector<std::string> srun_args;
  // --launcher sge
  std::string sge_pe;
  std::vector<std::string> sge_args;
};

// The counts and choices that PlanLaunch checks and resolves. Throws
// InvalidArgument for a malformed --workers.
launch::LaunchRequest Request(const LaunchArguments& args, bool servers_given,
                              bool launcher_given) {
  launch::LaunchRequest request{.launcher = args.launcher,
                                .launcher_given = launcher_given,
                                .num_workers = args.num_workers,
                                .nproc_per_node = args.nproc_per_node,
                                .nnodes = args.nnodes,
                                .num_servers = args.num_servers,
                                .servers_given = servers_given,
                                .no_scheduler = args.no_scheduler};
  if (!args.workers.empty()) {
    const launch::WorkerRange range = launch::ParseWorkerRange(args.workers);
    request.min_workers = range.min;
    request.max_workers = range.max;
  }
  return request;
}

// --host-discovery-script: what it needs of the rest of the command line
// (docs/launch.md, "Hosts from a discovery script"). Throws InvalidArgument.
void CheckDiscoveryArguments(const LaunchArguments& args, const launch::LaunchRequest& request) {
  if (args.host_discovery_script.empty()) return;
  const std::string flag = "--host-discovery-script " + args.host_discovery_script;
  if (!args.hosts.empty() || !args.hostfile.empty()) {
    throw InvalidArgument(
        fmt::format("{}: the script gives the hosts; -H/--hostfile cannot be given with it", flag));
  }
  if (request.launcher_given && args.launcher != "ssh") {
    throw InvalidArgument(
        fmt::format("{} is for --launcher ssh (the hosts are reached over ssh), "
                    "got --launcher {}",
                    flag, args.launcher));
  }
  if (!launch::IsElastic(request.min_workers, request.max_workers)) {
    throw InvalidArgument(fmt::format(
        "{} needs an elastic worker count, --workers MIN:MAX: hosts that come and go change the "
        "workers while the job runs",
        flag));
  }
  if (request.servers_given && request.num_servers > 0) {
    throw InvalidArgument(fmt::format(
        "{} needs a job without servers (-s 0): a worker that joins a job with servers is not "
        "built yet (docs/elastic.md)",
        flag));
  }
}

// --elastic-timeout is an elastic job's. Throws InvalidArgument.
void CheckElasticTimeout(const LaunchArguments& args, const launch::LaunchRequest& request) {
  if (args.elastic_timeout_given && !launch::IsElastic(request.min_workers, request.max_workers)) {
    throw InvalidArgument(
        fmt::format("--elastic-timeout {:g}: only an elastic job (--workers MIN:MAX) waits below "
                    "its minimum",
                    args.elastic_timeout_seconds));
  }
}

int RunLaunch(const LaunchArguments& args, bool servers_given, bool launcher_given) {
  launch::LaunchRequest request = Request(args, servers_given, launcher_given);
  CheckDiscoveryArguments(args, request);
  CheckElasticTimeout(args, request);
  std::vector<launch::HostSlots> named;  // by -H or --hostfile
  if (!args.hosts.empty()) named = launch::ParseHostList(args.hosts);
  if (!args.hostfile.empty()) named = launch::ReadHostfile(args.hostfile);
  if (!args.host_discovery_script.empty()) {
    request.launcher = "ssh";
    request.launcher_given = true;
  }
  const launch::LaunchPlan plan = launch::PlanLaunch(request, std::move(named));
  const std::string& launcher = plan.launcher;
  const std::vector<launch::HostSlots>& hosts = plan.hosts;

  launch::LocalJobOptions options;
  options.num_workers = plan.num_workers;
  options.min_workers = plan.min_workers;
  // Without -s, as torchrun and horovodrun: no servers, and worker 0 hosts
  // the rendezvous, so a plain command (`-- hostname`) ends at once. MXNet's
  // launch.py started one server per worker; `-s N` asks for servers.
  options.num_servers = servers_given ? args.num_servers : 0;
  options.rendezvous_in_worker = args.no_scheduler || !servers_given;
  options.command = args.command;
  // horovodrun's autotune flags are variables of every process; an --env
  // given for the same name comes later and wins.
  if (args.autotune) options.env.emplace_back("TANDEM_AUTOTUNE", "1");
  const auto elastic_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(std::llround(args.elastic_timeout_seconds * 1000.0)));
  if (launch::IsElastic(plan.min_workers, plan.num_workers)) {
    // The scheduler's wait below the minimum is the launcher's.
    options.env.emplace_back("TANDEM_ELASTIC_TIMEOUT",
                             fmt::format("{:g}", args.elastic_timeout_seconds));
  }
  if (!args.autotune_log.empty())
    options.env.emplace_back("TANDEM_AUTOTUNE_LOG", args.autotune_log);
  for (const auto& assignment : args.env) {
    options.env.push_back(launch::ParseEnvAssignment(assignment));
  }
  options.job_id = args.job_id;
  options.command_runs_all_roles = args.command_runs_all_roles;
  options.restarts.max_restarts = args.max_restarts;
  options.restarts.delay = std::chrono::milliseconds(
      static_cast<int64_t>(std::llround(args.restart_delay_seconds * 1000.0)));
  options.restarts.policy = launch::ParseRestartPolicy(args.restart_policy);

  launch::SupervisorOptions supervisor;
  // Elastic (--workers MIN:MAX): a worker's failure leaves the job while MIN remain.
  if (launch::IsElastic(plan.min_workers, plan.num_workers)) {
    supervisor.min_workers = plan.min_workers;
    // Without servers a running job admits new workers (docs/elastic.md,
    // "Workers that join"): --max-restarts replaces a worker that left
    // instead of restarting the whole job; with servers it restarts the job.
    if (options.num_servers == 0 && args.max_restarts > 0) {
      supervisor.replace_departed_workers = true;
      supervisor.max_replacements = args.max_restarts;
      supervisor.replacement_delay = options.restarts.delay;
      supervisor.replace_after_any_failure =
          options.restarts.policy == launch::RestartPolicy::kOnFailure;
      supervisor.elastic_timeout = elastic_timeout;
    }
  }
  supervisor.teardown_grace = std::chrono::milliseconds(
      static_cast<int64_t>(std::llround(args.teardown_grace_seconds * 1000.0)));
  if (!args.log_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(args.log_dir, ec);
    if (ec) {
      throw ConfigError(
          fmt::format("--log-dir {}: cannot create the directory: {}", args.log_dir, ec.message()));
    }
    supervisor.log_dir = args.log_dir;
  }
  auto env = base::Environment::FromProcess();
  if (launcher == "ssh") {
    if (hosts.empty() && args.host_discovery_script.empty()) {
      throw InvalidArgument(
          "--launcher ssh needs hosts: -H host1:SLOTS,host2:SLOTS or --hostfile FILE");
    }
    launch::SshJobOptions ssh;
    ssh.job = options;
    ssh.hosts = hosts;
    ssh.ssh_program = env.GetString("TANDEM_SSH", "ssh");
    ssh.ssh_args = args.ssh_args;
    ssh.remote_tandem = args.remote_tandem;
    ssh.remote_directory = args.sync_dst_dir;
    ssh.sync_directory = !args.sync_dst_dir.empty();
    ssh.forward_env = args.forward_env;
    ssh.scheduler_port = static_cast<uint16_t>(args.scheduler_port);
    ssh.host_discovery_script = args.host_discovery_script;
    ssh.discovery_interval = std::chrono::milliseconds(
        static_cast<int64_t>(std::llround(args.discovery_interval_seconds * 1000.0)));
    return launch::RunSshJob(ssh, supervisor, env);
  }
  if (launcher == "mpi") {
    launch::MpiJobOptions mpi;
    mpi.job = options;
    mpi.hosts = hosts;
    mpi.mpirun = env.GetString("TANDEM_MPIRUN", "mpirun");
    mpi.mpi_args = args.mpi_args;
    mpi.scheduler_port = static_cast<uint16_t>(args.scheduler_port);
    return launch::RunMpiJob(mpi, supervisor, env);
  }
  if (!hosts.empty()) {
    throw InvalidArgument(fmt::format(
        "-H/--hostfile is for --launcher ssh or mpi; {}",
        launcher == "slurm" ? "under Slurm, srun places the tasks"
        : launcher == "sge" ? "under Grid Engine, the parallel environment grants the hosts"
                            : "the local launcher uses this host"));
  }
  if (launcher == "sge") {
    launch::SgeJobOptions sge;
    sge.job = options;
    sge.qrsh = env.GetString("TANDEM_QRSH", "qrsh");
    sge.parallel_environment = args.sge_pe;
    sge.submit_args = args.sge_args;
    sge.scheduler_port = static_cast<uint16_t>(args.scheduler_port);
    return launch::RunSgeJob(sge, supervisor, env);
  }
  if (launcher == "slurm") {
    launch::SlurmJobOptions slurm;
    slurm.job = options;
    slurm.srun = env.GetString("TANDEM_SRUN", "srun");
    if (args.nnodes > 0) slurm.srun_args.push_back(fmt::format("--nodes={}", args.nnodes));
    slurm.srun_args.insert(slurm.srun_args.end(), args.srun_args.begin(), args.srun_args.end());
    slurm.scheduler_port = static_cast<uint16_t>(args.scheduler_port);
    return launch::RunSlurmJob(slurm, supervisor, env);
  }
  return launch::RunLocalJob(options, supervisor, env);
}

// Accepts a whole number in [min, max]; the message says what is wrong.
CLI::Validator Count(int min, int max, const char* meaning) {
  return CLI::Validator(
      [min, max, meaning](std::string& value) -> std::string {
        int parsed = 0;
        const char* end = value.data() + value.size();
        auto [ptr, ec] = std::from_chars(value.data(), end, parsed);
        if (ec != std::errc() || ptr != end)
          return fmt::format("'{}' is not a whole number", value);
        if (parsed < min || parsed > max) {
          return fmt::format("{} is out of range: {} must be between {} and {}", parsed, meaning,
                             min, max);
        }
        return {};
      },
      fmt::format("{}..{}", min, max), "count");
}

// Accepts a number of seconds, fractions allowed, 0 up to a day.
CLI::Validator Seconds() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        char* end = nullptr;
        double parsed = std::strtod(value.c_str(), &end);
        if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(parsed)) {
          return fmt::format("'{}' is not a number of seconds", value);
        }
        if (parsed < 0 || parsed > 86400) {
          return fmt::format("{} s is out of range: give 0 to 86400 seconds", value);
        }
        return {};
      },
      "SECONDS", "seconds");
}

}  // namespace

void RegisterLaunchCommand(CLI::App& app, CommandBody* body) {
  auto args = std::make_shared<LaunchArguments>();
  auto* cmd = app.add_subcommand(
      "launch",
      "Start a job (a scheduler, servers and workers) and supervise it: output prefixed per "
      "process, the whole job torn down when a process fails or on Ctrl-C, the job's exit code");
  cmd->footer(
      "Put the command after '--' so that its own options are not read as the launcher's:\n"
      "  tandem launch -n 4 -s 2 -- python3 train.py --epochs 3\n"
      "See docs/launch.md for the environment each process gets and the tear-down policy.");

  cmd->add_option("-n,--num-workers", args->num_workers,
                  "Number of workers (at least 1; -np N as horovodrun and mpirun spell it)")
      ->check(Count(1, launch::kMaxWorkerCount, "the number of workers"));
  cmd->add_option("--workers", args->workers,
                  "N workers (as -n N), or MIN:MAX: start MAX workers and let a worker that fails "
                  "leave the job while MIN remain (TANDEM_MIN_WORKERS=MIN in every process; "
                  "parameter-server jobs, --launcher local or ssh; docs/launch.md, \"Elastic "
                  "worker counts\")")
      ->type_name("[MIN:]MAX")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            return value.empty() ? "an empty value: give N, or MIN:MAX (e.g. 3:4)" : "";
          },
          "[MIN:]MAX", "workers"));
  cmd->add_option("--nproc-per-node,--nproc_per_node", args->nproc_per_node,
                  "As torchrun: workers per host (the number of workers is this times --nnodes)")
      ->check(Count(1, 1 << 16, "the number of workers per node"));
  cmd->add_option("--nnodes", args->nnodes,
                  "As torchrun: the number of hosts (more than 1 with --launcher slurm, or -H "
                  "naming that many hosts)")
      ->check(Count(1, 1 << 16, "the number of nodes"));
  auto* servers =
      cmd->add_option("-s,--num-servers", args->num_servers,
                      "Number of parameter servers (default 0: no servers, and worker 0 hosts the "
                      "rendezvous; MXNet's launch.py started one per worker)")
          ->check(Count(0, 1 << 16, "the number of servers"));
  auto* launcher_option =
      cmd->add_option("--launcher", args->launcher,
                      "How to start the processes: local (this host), ssh (the hosts of -H), mpi "
                      "(Open MPI's mpirun; on the hosts of -H if given), slurm (srun) or sge "
                      "(Grid Engine: qrsh -inherit in a parallel job, or a job submitted with "
                      "--sge-pe)")
          ->capture_default_str()
          ->check(CLI::Validator(
              [](std::string& value) -> std::string {
                if (value == "local" || value == "ssh" || value == "mpi" || value == "slurm" ||
                    value == "sge")
                  return {};
                return fmt::format(
                    "launcher '{}' does not exist in this version of tandem (local, ssh, mpi, "
                    "slurm, sge)",
                    value);
              },
              "local|ssh|mpi|slurm|sge", "launcher"));
  cmd->add_option("-H,--hosts", args->hosts,
                  "The hosts and their worker slots, as horovodrun and mpirun: host1:2,host2:2 "
                  "(hosts other than this one imply --launcher ssh)")
      ->type_name("HOST:SLOTS,...");
  cmd->add_option("--hostfile", args->hostfile,
                  "With --launcher ssh or mpi: a file of hosts, one per line ('host', "
                  "'host:SLOTS' or 'host slots=N'; '#' comments)");
  cmd->add_option("--mpi-arg", args->mpi_args,
                  "With --launcher mpi: an argument for mpirun before the program (repeatable), "
                  "e.g. --mpi-arg=--mca --mpi-arg=btl_tcp_if_include --mpi-arg=eth0")
      ->allow_extra_args(false);
  cmd->add_option("--srun-arg", args->srun_args,
                  "With --launcher slurm: an argument for srun before the program (repeatable), "
                  "e.g. --srun-arg=--partition=gpu")
      ->allow_extra_args(false);
  cmd->add_option("--sge-pe", args->sge_pe,
                  "With --launcher sge outside a Grid Engine job: submit the job into this "
                  "parallel environment (qrsh -pe PE SLOTS, a slot per process)")
      ->type_name("PE");
  cmd->add_option("--sge-arg", args->sge_args,
                  "With --launcher sge and --sge-pe: an argument for the submitting qrsh before "
                  "the program (repeatable), e.g. --sge-arg=-q --sge-arg=gpu.q")
      ->allow_extra_args(false);
  cmd->add_option("--ssh-arg", args->ssh_args,
                  "With --launcher ssh: an argument for ssh before the host (repeatable), e.g. "
                  "--ssh-arg=-p --ssh-arg=2222")
      ->allow_extra_args(false);
  cmd->add_option("--remote-tandem", args->remote_tandem,
                  "With --launcher ssh: the path of tandem on the remote hosts (default: this "
                  "binary's path)");
  cmd->add_option("--sync-dst-dir", args->sync_dst_dir,
                  "With --launcher ssh: copy the working directory to this directory on every "
                  "host (rsync over ssh) and start the processes there");
  cmd->add_option("--forward-env", args->forward_env,
                  "With --launcher ssh: forward this variable of the launcher's environment "
                  "(repeatable; DMLC_*, PS_*, MXNET_*, TANDEM_*, HOROVOD_* always are)")
      ->allow_extra_args(false);
  cmd->add_option("--host-discovery-script", args->host_discovery_script,
                  "An elastic job's hosts from a script (as horovodrun): it prints the hosts "
                  "available now, one per line ('host' or 'host:SLOTS'), and is run again every "
                  "--discovery-interval; workers leave hosts that go and replacements start on "
                  "hosts with free slots (implies --launcher ssh; needs --workers MIN:MAX and "
                  "-s 0; docs/launch.md)")
      ->type_name("SCRIPT");
  cmd->add_option("--discovery-interval", args->discovery_interval_seconds,
                  "With --host-discovery-script: seconds between its runs (default 1)")
      ->type_name("SECONDS")
      ->check(CLI::Range(0.05, 3600.0));
  cmd->add_option("--scheduler-port", args->scheduler_port,
                  "With --launcher ssh, mpi, slurm or sge: the scheduler's port on the first host "
                  "(default: random "
                  "in 10000..32767, below the ephemeral ports)")
      ->check(Count(1, 65535, "the scheduler port"));
  cmd->add_option("--env", args->env,
                  "Set NAME=VALUE in every process of the job (repeatable; overrides the "
                  "launcher's own variables and those it sets; launch.py's NAME:VALUE works too)")
      ->allow_extra_args(false)
      ->type_name("NAME=VALUE")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            try {
              launch::ParseEnvAssignment(value);
            } catch (const InvalidArgument& e) {
              return e.what();
            }
            return {};
          },
          "NAME=VALUE", "assignment"));
  cmd->add_flag("--autotune", args->autotune,
                "Tune the framework engine's fusion threshold, cycle time and allreduce "
                "algorithm while the job trains (TANDEM_AUTOTUNE=1, as horovodrun's --autotune; "
                "docs/collectives.md, Autotune)");
  cmd->add_option("--autotune-log-file", args->autotune_log,
                  "With --autotune: rank 0 writes every sample and the choice to this CSV "
                  "(TANDEM_AUTOTUNE_LOG)");
  cmd->add_option("--teardown-grace", args->teardown_grace_seconds,
                  "Seconds the other processes get to exit on their own after one fails, before "
                  "SIGTERM (SIGKILL follows 5 s later)")
      ->capture_default_str()
      ->check(Seconds());
  cmd->add_option("--log-dir", args->log_dir,
                  "Also write each process's output, unprefixed, to DIR/<role>-<rank>.log "
                  "(scheduler.log, server-0.log, worker-3.log; created if missing)")
      ->type_name("DIR");
  cmd->add_flag("--command-runs-all-roles", args->command_runs_all_roles,
                "Run COMMAND as the scheduler and the servers too (the program hands those roles "
                "to tandem), instead of the built-in `tandem scheduler` and `tandem server`");
  cmd->add_flag("--no-scheduler", args->no_scheduler,
                "Collectives-only job: start only the workers (no servers); worker 0 hosts the "
                "rendezvous in-process (TANDEM_RENDEZVOUS_IN_PROCESS=1, docs/collectives.md)");
  cmd->add_option("--max-restarts", args->max_restarts,
                  "Restart the whole job up to N times when a process fails (every process torn "
                  "down and started again with a fresh secret and scheduler port; each gets "
                  "TANDEM_RESTART_COUNT); never after Ctrl-C or a set-up error (docs/launch.md, "
                  "\"Restarts\"). In an elastic job without servers (--workers MIN:MAX -s 0) a "
                  "worker that left is replaced instead, by a new process that joins the running "
                  "job; replacements count against N")
      ->capture_default_str()
      ->check(Count(0, 1 << 20, "the number of restarts"));
  cmd->add_option("--restart-delay", args->restart_delay_seconds,
                  "Seconds between a failed attempt's tear-down and the restart")
      ->capture_default_str()
      ->check(Seconds());
  cmd->add_option("--restart-policy", args->restart_policy,
                  "Which failures --max-restarts retries: exit-code (a signal or a retryable exit "
                  "code 128..255, as Kubeflow's ExitCode policy) or on-failure (also 1..127, but "
                  "never the set-up codes 2, 76, 77, 78, 126, 127)")
      ->capture_default_str()
      ->check(CLI::IsMember({"exit-code", "on-failure"}));
  cmd->add_option("--elastic-timeout", args->elastic_timeout_seconds,
                  "With --workers MIN:MAX: seconds the job waits with fewer than MIN workers "
                  "for workers to join before it fails (TANDEM_ELASTIC_TIMEOUT, as horovodrun's "
                  "--elastic-timeout). The launcher's replacements (--max-restarts, -s 0) are such "
                  "workers; without one a loss below MIN fails the job at once. 0: never wait")
      ->capture_default_str()
      ->check(Seconds());
  cmd->add_option("--job-id", args->job_id,
                  "The job's id (TANDEM_JOB_ID); default: a fresh random one");
  cmd->add_option("command", args->command, "The workers' command and its arguments, after '--'");

  cmd->callback([cmd, body, args, servers, launcher_option] {
    if (args->num_workers == 0 && args->workers.empty() && args->nproc_per_node == 0 &&
        args->hosts.empty() && args->hostfile.empty()) {
      throw CLI::RequiredError(
          "how many workers? give -n N (or -np N as horovodrun, --nproc-per-node N as torchrun, "
          "-H host:SLOTS,..., or --workers MIN:MAX)",
          CLI::ExitCodes::RequiredError);
    }
    if (args->command.empty()) {
      throw CLI::RequiredError(
          "no command: put the workers' program after '--': tandem launch -n 2 -- python3 "
          "train.py",
          CLI::ExitCodes::RequiredError);
    }
    const bool servers_given = servers->count() > 0;
    args->elastic_timeout_given = cmd->count("--elastic-timeout") > 0;
    const bool launcher_given = launcher_option->count() > 0;
    // Flags that disagree are usage errors (exit 2), found before anything
    // starts; a hostfile's contents are checked when it is read.
    if (!args->hosts.empty() && !args->hostfile.empty()) {
      throw CLI::ValidationError("-H/--hosts and --hostfile both name the hosts: give one of them");
    }
    try {
      const launch::LaunchRequest request = Request(*args, servers_given, launcher_given);
      CheckElasticTimeout(*args, request);
      if (args->hostfile.empty()) {
        launch::PlanLaunch(request, args->hosts.empty() ? std::vector<launch::HostSlots>{}
                                                        : launch::ParseHostList(args->hosts));
      }
    } catch (const InvalidArgument& e) {
      throw CLI::ValidationError(e.what());
    }
    *body = [args, servers_given, launcher_given] {
      return RunLaunch(*args, servers_given, launcher_given);
    };
  });
}

std::vector<std::string> SpellLaunchArguments(const std::vector<std::string>& argv) {
  std::vector<std::string> out = argv;
  bool in_launch = false;
  for (size_t i = 1; i < out.size(); ++i) {
    if (!in_launch) {
      in_launch = out[i] == "launch";
      if (!in_launch && !out[i].empty() && out[i][0] != '-') break;  // another subcommand
      continue;
    }
    if (out[i] == "--") break;
    if (out[i] == "-np") out[i] = "--num-workers";
    if (out[i].rfind("-np=", 0) == 0) out[i] = "--num-workers=" + out[i].substr(4);
  }
  return out;
}

}  // namespace tandem::cli
