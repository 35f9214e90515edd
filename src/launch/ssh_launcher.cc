#include "launch/ssh_launcher.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

#include "launch/elastic_workers.h"
#include "launch/host_discovery.h"
#include "launch/job_credentials.h"
#include "launch/job_restarts.h"
#include "launch/prefixed_output.h"
#include "launch/rank_timeline.h"
#include "launch/remote_exec.h"
#include "tandem/error.h"

#ifndef TANDEM_VERSION
#define TANDEM_VERSION "unknown"
#endif

namespace tandem::launch {
namespace {

bool ForwardedAlways(const std::string& name) {
  for (const char* prefix : {"DMLC_", "PS_", "MXNET_", "TANDEM_", "HOROVOD_"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

// The remote shell command that runs `argv` under remote-exec.
std::string RemoteCommand(const SshJobOptions& o, const std::string& tandem,
                          const std::string& label, const std::vector<std::string>& argv) {
  std::string cmd = "exec " + ShellQuote(tandem) + " remote-exec --label " + ShellQuote(label);
  if (!o.remote_directory.empty()) cmd += " --cwd " + ShellQuote(o.remote_directory);
  cmd += " --";
  for (const auto& a : argv) cmd += " " + ShellQuote(a);
  return cmd;
}

std::vector<std::string> SshArgv(const SshJobOptions& o, const HostSlots& host,
                                 const std::string& remote_command) {
  std::vector<std::string> argv = {o.ssh_program, "-o", "BatchMode=yes"};
  argv.insert(argv.end(), o.ssh_args.begin(), o.ssh_args.end());
  argv.push_back(host.login);
  argv.push_back(remote_command);
  return argv;
}

}  // namespace

std::string ShellQuote(const std::string& word) {
  bool plain = !word.empty();
  for (char c : word) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              std::string_view("_./:=@%+,-").find(c) != std::string_view::npos;
    plain = plain && ok;
  }
  if (plain) return word;
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::vector<size_t> PlaceSshJob(const SshJobOptions& options) {
  const auto& hosts = options.hosts;
  std::vector<size_t> slots;
  for (size_t h = 0; h < hosts.size(); ++h) {
    for (int s = 0; s < hosts[h].slots; ++s) slots.push_back(h);
  }
  std::vector<size_t> place = {0};
  for (int j = 0; j < options.job.num_servers; ++j)
    place.push_back(static_cast<size_t>(j) % hosts.size());
  for (int i = 0; i < options.job.num_workers; ++i)
    place.push_back(slots[static_cast<size_t>(i) % slots.size()]);
  return place;
}

std::vector<ProcessSpec> BuildSshJob(const SshJobOptions& options, const LocalJobIdentity& identity,
                                     const std::map<std::string, std::string>& launcher_env,
                                     const std::vector<size_t>* place_given) {
  if (options.hosts.empty()) throw InvalidArgument("the ssh launcher needs at least one host (-H)");
  // The local job's specs give each process's labels, roles and contract;
  // their environments are rewritten for the remote side.
  LocalJobOptions job = options.job;
  const std::string tandem =
      options.remote_tandem.empty() ? job.tandem_binary : options.remote_tandem;
  if (!job.command_runs_all_roles) job.tandem_binary = tandem;
  std::vector<ProcessSpec> local = BuildLocalJob(job, identity, {});
  const std::vector<size_t> place = place_given ? *place_given : PlaceSshJob(options);
  const std::string scheduler_host = options.hosts[place.front()].host;

  std::map<std::string, std::string> forwarded;
  for (const auto& [name, value] : launcher_env) {
    // TANDEM_MIN_WORKERS is the job's (BuildLocalJob), never an inherited copy.
    if (ForwardedAlways(name) && name != "TANDEM_MIN_WORKERS") forwarded[name] = value;
  }
  for (const auto& name : options.forward_env) {
    auto it = launcher_env.find(name);
    if (it == launcher_env.end()) {
      throw InvalidArgument(fmt::format(
          "--forward-env {}: the variable is not set in the launcher's environment", name));
    }
    forwarded[name] = it->second;
  }

  const std::vector<std::map<std::string, std::string>> contracts =
      RemoteContracts(local, place, options.hosts, job.num_workers, identity.master_port,
                      scheduler_host, options.job.env, forwarded);
  std::vector<ProcessSpec> specs;
  for (size_t i = 0; i < local.size(); ++i) {
    const HostSlots& host = options.hosts[place[i]];
    ProcessSpec spec;
    spec.label = local[i].label;
    spec.service = local[i].service;
    spec.host = host.host;
    spec.env = launcher_env;  // ssh's own (SSH_AUTH_SOCK, HOME, PATH)
    spec.argv = SshArgv(options, host, RemoteCommand(options, tandem, spec.label, local[i].argv));
    spec.stdin_data = EncodeRemoteEnvironment(contracts[i]);
    specs.push_back(std::move(spec));
  }
  return specs;
}

namespace {

// Checks every host in parallel: ssh works and the remote tandem is this
// version. Returns one line per failing host.
std::vector<std::string> CheckHosts(const SshJobOptions& o, const std::string& tandem,
                                    const std::map<std::string, std::string>& env) {
  std::vector<ProcessSpec> specs;
  for (const HostSlots& host : o.hosts) {
    ProcessSpec spec;
    spec.label = "check " + host.login;
    spec.env = env;
    spec.argv = SshArgv(o, host, "exec " + ShellQuote(tandem) + " --version");
    std::vector<std::string> with_timeout = {
        spec.argv[0], "-o",
        fmt::format("ConnectTimeout={}", std::max<int64_t>(1, o.check_timeout.count() / 1000))};
    with_timeout.insert(with_timeout.end(), spec.argv.begin() + 1, spec.argv.end());
    spec.argv = with_timeout;
    specs.push_back(std::move(spec));
  }
  const std::vector<FinishedRun> runs = RunToEnd(specs, o.check_timeout, 4096);
  std::vector<std::string> failures;
  const std::string want = fmt::format("tandem {}", TANDEM_VERSION);
  for (size_t h = 0; h < runs.size(); ++h) {
    const FinishedRun& p = runs[h];
    if (p.timed_out) {
      failures.push_back(fmt::format("{}: no answer within {} ms (ssh or the host hangs)",
                                     o.hosts[h].login, o.check_timeout.count()));
      continue;
    }
    const int status = p.status;
    std::string out = p.out + p.err;
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code == 255) {
      failures.push_back(fmt::format("{}: ssh failed: {}", o.hosts[h].login, out));
    } else if (code == 127 || code == 126) {
      failures.push_back(fmt::format("{}: {} cannot be run there ({}); give --remote-tandem PATH",
                                     o.hosts[h].login, tandem, out));
    } else if (code != 0) {
      failures.push_back(
          fmt::format("{}: `{} --version` exited {}: {}", o.hosts[h].login, tandem, code, out));
    } else if (out.find(want) == std::string::npos) {
      failures.push_back(fmt::format("{}: the remote tandem says '{}', the launcher is '{}'",
                                     o.hosts[h].login, out, want));
    }
  }
  return failures;
}

void SyncDirectory(const SshJobOptions& o, const std::map<std::string, std::string>& env) {
  std::string rsh = ShellQuote(o.ssh_program) + " -o BatchMode=yes";
  for (const auto& a : o.ssh_args) rsh += " " + ShellQuote(a);
  for (const auto& host : o.hosts) {
    std::string target =
        host.login.find(':') != std::string::npos ? "[" + host.login + "]" : host.login;
    std::vector<std::string> argv = {
        "rsync", "-a", "--delete", "-e", rsh, "./", target + ":" + o.remote_directory + "/"};
    ProcessSpec spec{"rsync " + host.login, argv, env, std::nullopt};
    sigset_t none;
    sigemptyset(&none);
    StartedProcess p = StartChildProcess(spec, none);
    std::string output;
    char buf[1024];
    for (auto* fd : {&p.stdout_pipe, &p.stderr_pipe}) {
      ::fcntl(fd->get(), F_SETFL, 0);  // blocking: read to the end
      for (ssize_t n; (n = ::read(fd->get(), buf, sizeof(buf))) > 0;)
        output.append(buf, static_cast<size_t>(n));
    }
    int status = 0;
    ::waitpid(p.pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      throw InvalidArgument(fmt::format("--sync-dst-dir: rsync to {}:{} failed: {}", host.login,
                                        o.remote_directory, output));
    }
  }
}

}  // namespace

int DiscoveredWorkerCount(const LocalJobOptions& job, const std::vector<HostSlots>& hosts,
                          const std::string& script) {
  int slots = 0;
  for (const auto& h : hosts) slots += h.slots;
  const int minimum = job.min_workers > 0 ? job.min_workers : job.num_workers;
  if (slots < minimum) {
    throw InvalidArgument(fmt::format(
        "the host discovery script {} found {} worker slot{} ({}), fewer than the job's minimum "
        "of {} workers (--workers MIN:MAX); a job waits for no hosts at its start",
        script, slots, slots == 1 ? "" : "s", DescribeHosts(hosts), minimum));
  }
  return std::min(job.num_workers, slots);
}

namespace {

// The workers' hosts of a job with a discovery script, for the supervisor
// (SupervisorOptions::worker_hosts): the script polled during each attempt,
// and a worker's ssh command rebuilt for another host.
class DiscoveredSshHosts : public WorkerHosts {
 public:
  // An attempt starts on `options.hosts` with `identity`; polling starts
  // (on the calling thread's signal mask: the supervisor's).
  void BeginAttempt(const SshJobOptions& options, const LocalJobIdentity& identity,
                    const std::map<std::string, std::string>& attempt_env) {
    options_ = options;
    identity_ = identity;
    attempt_env_ = attempt_env;
    discovery_ = std::make_unique<HostDiscovery>(options.host_discovery_script, attempt_env,
                                                 options.discovery_interval,
                                                 options.discovery_timeout, options.hosts);
  }

  // The hosts in force at the attempt's end (the next attempt starts on
  // them); polling stops.
  std::vector<HostSlots> EndAttempt() {
    std::vector<HostSlots> hosts = discovery_ ? discovery_->Latest() : options_.hosts;
    discovery_.reset();
    return hosts;
  }

  std::optional<std::vector<HostSlots>> Changed() override { return discovery_->Changed(); }

  std::optional<std::string> TakeError() override { return discovery_->TakeError(); }

  ProcessSpec MoveTo(const ProcessSpec& worker, const HostSlots& host) override {
    const std::vector<ProcessSpec> local = BuildLocalJob(options_.job, identity_, {});
    size_t index = local.size();
    for (size_t i = 0; i < local.size(); ++i) {
      if (local[i].label == worker.label) index = i;
    }
    if (index == local.size()) {
      throw InvalidArgument(fmt::format("{} is not a process of this job", worker.label));
    }
    SshJobOptions moved = options_;
    std::vector<size_t> place = PlaceSshJob(options_);
    size_t h = 0;
    while (h < moved.hosts.size() && moved.hosts[h].host != host.host) ++h;
    if (h == moved.hosts.size()) moved.hosts.push_back(host);
    place[index] = h;
    return BuildSshJob(moved, identity_, attempt_env_, &place)[index];
  }

 private:
  SshJobOptions options_;
  LocalJobIdentity identity_;
  std::map<std::string, std::string> attempt_env_;
  std::unique_ptr<HostDiscovery> discovery_;
};

}  // namespace

int RunSshJob(const SshJobOptions& options, const SupervisorOptions& supervisor_options,
              const base::Environment& launcher_env) {
  SshJobOptions o = options;
  const bool discovering = !o.host_discovery_script.empty();
  if (discovering) {
    o.hosts = DiscoverHosts(o.host_discovery_script, launcher_env.vars(), o.discovery_timeout);
    o.job.num_workers = DiscoveredWorkerCount(o.job, o.hosts, o.host_discovery_script);
    if (o.job.min_workers >= o.job.num_workers) o.job.min_workers = 0;  // not elastic then
  }
  ValidateLocalJobOptions(o.job);
  if (o.hosts.empty()) throw InvalidArgument("the ssh launcher needs at least one host (-H)");
  if (o.job.tandem_binary.empty()) o.job.tandem_binary = CurrentExecutablePath();
  if (o.remote_tandem.empty()) o.remote_tandem = o.job.tandem_binary;
  if (o.remote_directory.empty()) {
    char cwd[4096];
    if (::getcwd(cwd, sizeof(cwd)) == nullptr) throw IoError("getcwd failed");
    o.remote_directory = cwd;
  }
  if (o.job.job_id.empty()) o.job.job_id = GenerateJobId();

  const auto& env = launcher_env.vars();
  FindExecutable(o.ssh_program, env);
  if (o.sync_directory) SyncDirectory(o, env);
  if (auto failures = CheckHosts(o, o.remote_tandem, env); !failures.empty()) {
    std::string text = "hosts failed their check before the job started:";
    for (const auto& f : failures) text += "\n  " + f;
    throw InvalidArgument(text);
  }
  DiscoveredSshHosts discovered;
  SupervisorOptions supervision = supervisor_options;
  if (discovering) supervision.worker_hosts = &discovered;
  auto attempt = [&](ProcessSupervisor& supervisor,
                     const std::map<std::string, std::string>& attempt_env) {
    LocalJobIdentity identity = NewJobIdentity(
        o.job.job_id, options.scheduler_port != 0 ? options.scheduler_port : RandomSchedulerPort());
    identity.master_port = MasterPortBeside(identity.scheduler_port, RandomSchedulerPort);
    std::vector<ProcessSpec> specs = BuildSshJob(o, identity, attempt_env);
    OutputSink(supervisor_options.stderr_fd)
        .WriteLine(fmt::format(
            "[launcher] job {}: scheduler at {}:{} over ssh, {} server{}, {} "
            "on {} host{}{}\n",
            identity.job_id, o.hosts.front().host, identity.scheduler_port, o.job.num_servers,
            o.job.num_servers == 1 ? "" : "s",
            DescribeWorkerCount(o.job.num_workers, o.job.min_workers,
                                supervisor.max_replacements()),
            o.hosts.size(), o.hosts.size() == 1 ? "" : "s",
            discovering ? fmt::format(" ({}, from {}, polled every {} ms)", DescribeHosts(o.hosts),
                                      o.host_discovery_script, o.discovery_interval.count())
                        : std::string()));
    if (discovering) discovered.BeginAttempt(o, identity, attempt_env);
    for (const auto& spec : specs) supervisor.Start(spec);
    JobOutcome outcome = supervisor.Run();
    if (discovering) o.hosts = discovered.EndAttempt();
    // After each attempt: the merged timeline is the last attempt's.
    MergeRankTimelines(BuildLocalJob(o.job, identity, attempt_env),
                       OutputSink(supervisor_options.stderr_fd));
    return outcome;
  };
  return RunWithRestarts(o.job.restarts, supervision, launcher_env, attempt);
}

}  // namespace tandem::launch
