// docs/launch.md, "Through Grid Engine: --launcher sge".
#include "launch/sge_launcher.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "launch/job_credentials.h"
#include "launch/job_restarts.h"
#include "launch/rank_exec.h"
#include "launch/rank_timeline.h"
#include "launch/remote_exec.h"
#include "launch/restart_policy.h"
#include "launch/worker_variables.h"
#include "tandem/error.h"

namespace tandem::launch {
namespace {

// "a scheduler, 1 server and 4 workers", for messages.
std::string Processes(const LocalJobOptions& job) {
  return fmt::format("{}{} server{} and {} worker{}",
                     job.rendezvous_in_worker ? "" : "a scheduler, ", job.num_servers,
                     job.num_servers == 1 ? "" : "s", job.num_workers,
                     job.num_workers == 1 ? "" : "s");
}

// Variables of the launcher's own environment that must not reach a task
// through qrsh -V: the job's secret (qrsh -V spools the environment where
// other users of the host may read it; the secret travels on stdin), and
// what is per process or per host, which the stdin header sets where it
// applies; and TANDEM_MIN_WORKERS, which is the launcher's to set (a job
// under Grid Engine is never elastic: launch_plan.h).
bool KeptFromTasks(const std::string& name) {
  static const char* const kNames[] = {
      "TANDEM_SECRET",  "DMLC_WORKER_ID",          "DMLC_SERVER_ID",
      "DMLC_NODE_HOST", kSgeInnerLauncherVariable, "TANDEM_MIN_WORKERS",
  };
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  for (const auto& n : WorkerVariableNames()) {
    if (name == n) return true;
  }
  return false;
}

std::string WorkingDirectory() {
  char cwd[4096];
  if (::getcwd(cwd, sizeof(cwd)) == nullptr) {
    throw IoError(fmt::format("getcwd: {}", std::strerror(errno)));
  }
  return cwd;
}

// Inside a PE job: the tasks through qrsh -inherit, under one supervisor.
int RunInsideJob(const SgeJobOptions& o, const std::string& hostfile,
                 const SupervisorOptions& supervisor_options,
                 const base::Environment& launcher_env) {
  if (!o.parallel_environment.empty() || !o.submit_args.empty()) {
    throw InvalidArgument(fmt::format(
        "--sge-pe and --sge-arg submit a new Grid Engine job, but this launcher already runs "
        "inside job {} (PE_HOSTFILE={}): drop them, the job's slots are used",
        launcher_env.GetString("JOB_ID", "?"), hostfile));
  }
  const std::string sge_job = launcher_env.GetString("JOB_ID", "");
  if (sge_job.empty()) {
    throw ConfigError(fmt::format(
        "PE_HOSTFILE={} is set but JOB_ID is not: qrsh -inherit starts tasks of the job JOB_ID "
        "names (run the launcher in the job script or qrsh session of a parallel job)",
        hostfile));
  }
  const std::vector<HostSlots> hosts = ReadPeHostfile(hostfile);
  PlaceSgeJob(hosts, ProcessCount(o.job));  // too few slots: refused before anything starts
  FindExecutable(o.qrsh, launcher_env.vars());
  const std::string cwd = WorkingDirectory();

  const SupervisorOptions& options = supervisor_options;
  std::optional<ProcessExit> cause;  // the last attempt's, when it failed
  auto attempt = [&](ProcessSupervisor& supervisor,
                     const std::map<std::string, std::string>& attempt_env) {
    LocalJobIdentity identity = NewJobIdentity(
        o.job.job_id, o.scheduler_port != 0 ? o.scheduler_port : RandomSchedulerPort());
    identity.master_port = MasterPortBeside(identity.scheduler_port, RandomSchedulerPort);
    std::vector<ProcessSpec> specs = BuildSgeJob(o, hosts, identity, attempt_env, cwd);
    OutputSink(options.stderr_fd)
        .WriteLine(fmt::format(
            "[{}] job {}: scheduler at {}:{}{} through {} -inherit in Grid Engine job {}, {} "
            "server{}, {} worker{} on {} host{}\n",
            options.log_tag, identity.job_id, hosts.front().host, identity.scheduler_port,
            o.job.rendezvous_in_worker ? " (in worker 0)" : "", o.qrsh, sge_job, o.job.num_servers,
            o.job.num_servers == 1 ? "" : "s", o.job.num_workers, o.job.num_workers == 1 ? "" : "s",
            hosts.size(), hosts.size() == 1 ? "" : "s"));
    for (const auto& spec : specs) supervisor.Start(spec);
    JobOutcome outcome = supervisor.Run();
    cause = outcome.interrupt_signal != 0 ? std::nullopt : AttemptCause(outcome);
    // After each attempt: the merged timeline is the last attempt's.
    MergeRankTimelines(BuildLocalJob(o.job, identity, attempt_env), OutputSink(options.stderr_fd));
    return outcome;
  };
  const int code = RunWithRestarts(o.job.restarts, options, launcher_env, attempt);
  if (cause && code != 0 && launcher_env.GetString(kSgeInnerLauncherVariable, "") == "1") {
    // The launcher that submitted the job relays this report (as it would
    // a rank-exec's), so its exit code and last line name the cause too.
    OutputSink(options.stderr_fd)
        .WriteLine(fmt::format("[{}] job failed: {}\n", kRankExecLogTag, cause->Describe()));
  }
  return code;
}

// Outside a job: one qrsh that submits the job and runs the launch in it.
int SubmitJob(const SgeJobOptions& o, const SupervisorOptions& supervisor_options,
              const base::Environment& launcher_env) {
  if (o.parallel_environment.empty()) {
    throw InvalidArgument(fmt::format(
        "--launcher sge outside a Grid Engine job (PE_HOSTFILE is not set) submits one: give "
        "the parallel environment with --sge-pe PE (its {} slots: {}), or run tandem launch "
        "in a job script submitted with qsub -pe PE {}",
        ProcessCount(o.job), Processes(o.job), ProcessCount(o.job)));
  }
  SgeJobOptions inner = o;
  if (!supervisor_options.log_dir.empty()) {
    // The launcher inside the job writes the per-process files; the qrsh
    // here would only write a copy of all of them.
    inner.log_dir = supervisor_options.log_dir;
    if (inner.log_dir.front() != '/') inner.log_dir = WorkingDirectory() + "/" + inner.log_dir;
  }
  inner.teardown_grace_ms = supervisor_options.teardown_grace.count();
  SupervisorOptions options = supervisor_options;
  options.log_dir.clear();
  auto build = [&inner](const std::map<std::string, std::string>& env) {
    RankLaunch launch{BuildSgeSubmission(inner, env), {}};
    launch.announcement = fmt::format(
        "job {}: submitting it to Grid Engine through {} in parallel environment {} with {} "
        "slot{} ({})",
        inner.job.job_id, inner.qrsh, inner.parallel_environment, ProcessCount(inner.job),
        ProcessCount(inner.job) == 1 ? "" : "s", Processes(inner.job));
    return launch;
  };
  // The launcher inside the job restarts it in the slots it holds.
  return RunRankLauncher(build, RestartOptions{}, options, launcher_env);
}

}  // namespace

std::vector<HostSlots> ParsePeHostfile(std::string_view text, const std::string& source) {
  std::vector<HostSlots> hosts;
  std::istringstream lines{std::string(text)};
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    std::istringstream fields(line);
    std::string host, slots_text;
    if (!(fields >> host)) continue;  // a blank line
    fields >> slots_text;
    int slots = 0;
    try {
      size_t used = 0;
      slots = std::stoi(slots_text, &used);
      if (used != slots_text.size()) slots = 0;
    } catch (const std::exception&) {
      slots = 0;
    }
    if (slots < 1) {
      throw ConfigError(fmt::format(
          "{} line {}: '{}' is not 'HOST SLOTS QUEUE PROCESSORS' with a positive slot count",
          source, number, line));
    }
    // A host granted slots in two queues appears twice: its slots add up.
    bool merged = false;
    for (auto& h : hosts) {
      if (h.host == host) {
        h.slots += slots;
        merged = true;
      }
    }
    if (!merged) hosts.push_back({host, host, slots});
  }
  if (hosts.empty()) throw ConfigError(fmt::format("{} names no host", source));
  return hosts;
}

std::vector<HostSlots> ReadPeHostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw ConfigError(
        fmt::format("PE_HOSTFILE={}: cannot read it: {}", path, std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParsePeHostfile(text.str(), "PE_HOSTFILE " + path);
}

std::vector<size_t> PlaceSgeJob(const std::vector<HostSlots>& hosts, int processes) {
  std::vector<size_t> place;
  for (size_t h = 0; h < hosts.size(); ++h) {
    for (int s = 0; s < hosts[h].slots && static_cast<int>(place.size()) < processes; ++s) {
      place.push_back(h);
    }
  }
  if (static_cast<int>(place.size()) < processes) {
    throw InvalidArgument(fmt::format(
        "the job has {} processes but Grid Engine granted {} slot{} (PE_HOSTFILE): each process "
        "is a task of the job and takes a slot; submit with -pe PE {} (and job_is_first_task "
        "FALSE in the parallel environment), or start fewer processes",
        processes, place.size(), place.size() == 1 ? "" : "s", processes));
  }
  return place;
}

std::vector<ProcessSpec> BuildSgeJob(const SgeJobOptions& options,
                                     const std::vector<HostSlots>& hosts,
                                     const LocalJobIdentity& identity,
                                     const std::map<std::string, std::string>& launcher_env,
                                     const std::string& working_directory) {
  const LocalJobOptions& job = options.job;
  // The local job's specs give each process's label, role and contract;
  // their environments become the stdin headers.
  std::vector<ProcessSpec> local = BuildLocalJob(job, identity, {});
  const std::vector<size_t> place = PlaceSgeJob(hosts, static_cast<int>(local.size()));
  const std::string& scheduler_host = hosts[place[0]].host;
  const std::vector<std::map<std::string, std::string>> contracts = RemoteContracts(
      local, place, hosts, job.num_workers, identity.master_port, scheduler_host, job.env, {});

  std::map<std::string, std::string> qrsh_env;
  for (const auto& [name, value] : launcher_env) {
    if (!KeptFromTasks(name)) qrsh_env[name] = value;
  }
  std::vector<ProcessSpec> specs;
  for (size_t i = 0; i < local.size(); ++i) {
    const std::string& host = hosts[place[i]].host;
    ProcessSpec spec;
    spec.label = local[i].label;
    spec.service = local[i].service;
    spec.host = host;
    spec.env = qrsh_env;
    spec.argv = {options.qrsh,      "-inherit",    "-V",      "-noshell", host,
                 job.tandem_binary, "remote-exec", "--label", spec.label, "--cwd",
                 working_directory, "--"};
    spec.argv.insert(spec.argv.end(), local[i].argv.begin(), local[i].argv.end());
    spec.stdin_data = EncodeRemoteEnvironment(contracts[i]);
    specs.push_back(std::move(spec));
  }
  return specs;
}

ProcessSpec BuildSgeSubmission(const SgeJobOptions& options,
                               const std::map<std::string, std::string>& launcher_env) {
  const LocalJobOptions& job = options.job;
  ProcessSpec spec;
  spec.label = options.qrsh;
  spec.prefix_output = false;  // the launcher inside the job labels every line
  // qrsh ends on SIGINT (and Grid Engine then deletes the job) but not on
  // SIGTERM: whatever stops the job reaches it as SIGINT.
  spec.stop_with_two_sigints = true;
  spec.env = launcher_env;
  spec.env.erase("TANDEM_SECRET");  // -V spools it; the launcher inside makes the job's own
  spec.env[kSgeInnerLauncherVariable] = "1";
  const int slots = ProcessCount(job);
  spec.argv = {options.qrsh,
               "-now",
               "no",
               "-pe",
               options.parallel_environment,
               std::to_string(slots),
               "-cwd",
               "-V",
               "-noshell",
               "-N",
               "tandem"};
  spec.argv.insert(spec.argv.end(), options.submit_args.begin(), options.submit_args.end());
  spec.argv.insert(spec.argv.end(), {job.tandem_binary, "launch", "--launcher", "sge", "-n",
                                     std::to_string(job.num_workers)});
  if (job.rendezvous_in_worker) {
    spec.argv.emplace_back("--no-scheduler");
  } else {
    spec.argv.insert(spec.argv.end(), {"-s", std::to_string(job.num_servers)});
  }
  if (job.command_runs_all_roles) spec.argv.emplace_back("--command-runs-all-roles");
  spec.argv.insert(
      spec.argv.end(),
      {"--job-id", job.job_id, "--teardown-grace",
       fmt::format("{:.3f}", static_cast<double>(options.teardown_grace_ms) / 1000.0)});
  if (options.scheduler_port != 0) {
    spec.argv.insert(spec.argv.end(), {"--scheduler-port", std::to_string(options.scheduler_port)});
  }
  if (!options.log_dir.empty()) spec.argv.insert(spec.argv.end(), {"--log-dir", options.log_dir});
  if (job.restarts.max_restarts > 0) {
    spec.argv.insert(
        spec.argv.end(),
        {"--max-restarts", std::to_string(job.restarts.max_restarts), "--restart-delay",
         fmt::format("{:.3f}", static_cast<double>(job.restarts.delay.count()) / 1000.0),
         "--restart-policy", std::string(RestartPolicyName(job.restarts.policy))});
  }
  for (const auto& [name, value] : job.env) {
    spec.argv.insert(spec.argv.end(), {"--env", fmt::format("{}={}", name, value)});
  }
  spec.argv.emplace_back("--");
  spec.argv.insert(spec.argv.end(), job.command.begin(), job.command.end());
  return spec;
}

int RunSgeJob(const SgeJobOptions& options, const SupervisorOptions& supervisor_options,
              const base::Environment& launcher_env) {
  ValidateLocalJobOptions(options.job);
  SgeJobOptions o = options;
  if (o.job.tandem_binary.empty()) o.job.tandem_binary = CurrentExecutablePath();
  if (o.job.job_id.empty()) o.job.job_id = GenerateJobId();
  const std::string hostfile = launcher_env.GetString("PE_HOSTFILE", "");
  if (!hostfile.empty()) return RunInsideJob(o, hostfile, supervisor_options, launcher_env);
  return SubmitJob(o, supervisor_options, launcher_env);
}

}  // namespace tandem::launch
