#include "launch/process_supervisor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>
#include <map>

#include "base/exit_code.h"
#include "base/unique_fd.h"
#include "launch/host_discovery.h"
#include "launch/restart_policy.h"
#include "tandem/error.h"

namespace tandem::launch {
namespace {

// The text of a /proc/PID/stat file, or empty when it cannot be read (the
// process is gone: open fails with ENOENT, read with ESRCH). Plain read(2):
// a std::ifstream throws from inside its buffer on ESRCH.
std::string ReadProcStat(const std::filesystem::path& path) {
  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return {};
  std::string text;
  char buf[1024];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return {};
    if (n == 0) return text;
    text.append(buf, static_cast<size_t>(n));
  }
}

using std::chrono::milliseconds;

// Reaping and group checks run at least this often even without SIGCHLD:
// a process group whose leader has exited may still hold members that are
// not our children, whose end no signal tells us about.
constexpr milliseconds kSweepInterval{200};

// Bounds one turn's reading of a pipe, so that a child that writes without
// pause cannot starve the others, the signals and the deadlines.
constexpr int kReadsPerTurn = 16;
// At a child's exit its pipes are read further, so that its last lines
// come before the report of its exit.
constexpr int kReadsAtExit = 1024;

std::string Seconds(milliseconds d) { return fmt::format("{:g} s", d.count() / 1000.0); }

constexpr std::string_view kTearingDown = "; tearing down the job";
constexpr std::string_view kSeenAt = " (seen at ";

// Now, in seconds since the epoch.
double WallClockSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string Groups(int n) {
  return n == 1 ? "1 process group" : fmt::format("{} process groups", n);
}

}  // namespace

// One started process, its group and its two output streams.
struct ProcessSupervisor::Child {
  Child(std::string label_in, StartedProcess started, OutputSink* out, OutputSink* err,
        const std::string& prefix)
      : label(std::move(label_in)),
        pid(started.pid),
        stdout_pipe(std::move(started.stdout_pipe)),
        stderr_pipe(std::move(started.stderr_pipe)),
        stdin_pipe(std::move(started.stdin_pipe)),
        stdout_lines(prefix, out),
        stderr_lines(prefix, err) {}

  std::string label;
  std::string last_words;    // ProcessExit::last_words
  pid_t pid;                 // also the process group id
  bool exited = false;       // reaped (or given up on)
  bool finished_ok = false;  // reaped with status 0
  bool group_gone = false;   // kill(-pid, 0) failed with ESRCH (or given up on)
  bool service = false;      // ProcessSpec::service
  std::string host;          // ProcessSpec::host
  bool two_sigints = false;  // ProcessSpec::stop_with_two_sigints
  // A departed worker's replacement (not one of the places counted), and
  // whether it was stopped for not joining (StopUnjoinedReplacements).
  bool replacement = false;
  bool stopped_unjoined = false;
  // Stopped because its host has no slot for it any more (FollowWorkerHosts).
  bool stopped_for_host = false;
  // A worker's spec, kept for its replacement.
  std::optional<ProcessSpec> spec;
  // The second of two SIGINTs is due then.
  std::optional<std::chrono::steady_clock::time_point> second_sigint_at;
  // A worker that left an elastic job: when what is left of its group gets
  // SIGKILL (StopDepartedGroup).
  std::optional<std::chrono::steady_clock::time_point> departed_kill_at;
  // With ProcessSpec::relays_rank_exec: the first rank failure its output
  // reported, if any.
  std::optional<ProcessExit> relayed_failure;
  double relayed_seen_at = 0;  // of relayed_failure; infinity when not said
  base::UniqueFd stdout_pipe;  // closed at EOF
  base::UniqueFd stderr_pipe;  // closed at EOF
  base::UniqueFd stdin_pipe;   // with stdin data: held open until the child exits
  LinePrefixer stdout_lines;
  LinePrefixer stderr_lines;
  // With a log directory: the log file and the unprefixed copies of both
  // streams written to it.
  base::UniqueFd log_fd;
  std::unique_ptr<OutputSink> log_sink;
  std::unique_ptr<LinePrefixer> stdout_log;
  std::unique_ptr<LinePrefixer> stderr_log;
};

std::optional<RankFailureReport> ParseRankFailureReport(std::string_view line) {
  const std::string tag = fmt::format("[{}] ", kRankExecLogTag);
  if (line.substr(0, tag.size()) != tag) return std::nullopt;
  line.remove_prefix(tag.size());
  constexpr std::string_view kJobFailed = "job failed: ";
  RankFailureReport report;
  if (line.substr(0, kJobFailed.size()) == kJobFailed) {
    report.description = line.substr(kJobFailed.size());
    return report;
  }
  if (line.size() <= kTearingDown.size() ||
      line.substr(line.size() - kTearingDown.size()) != kTearingDown) {
    return std::nullopt;
  }
  report.description = line.substr(0, line.size() - kTearingDown.size());
  const size_t at = report.description.rfind(kSeenAt);
  if (at != std::string_view::npos && report.description.back() == ')') {
    const std::string stamp(report.description.substr(
        at + kSeenAt.size(), report.description.size() - 1 - at - kSeenAt.size()));
    char* end = nullptr;
    const double seen = std::strtod(stamp.c_str(), &end);
    if (!stamp.empty() && end == stamp.c_str() + stamp.size()) {
      report.seen_at = seen;
      report.description = report.description.substr(0, at);
    }
  }
  return report;
}

std::string LogFileName(std::string_view label) {
  std::string name(label);
  for (char& c : name) {
    if (c == ' ' || c == '/') c = '-';
  }
  return name + ".log";
}

std::string ProcessExit::Describe() const {
  if (!relayed.empty()) return relayed;
  if (!host.empty())
    return fmt::format("{} on {} (pid {}) {}", label, host, pid, status.Describe());
  return fmt::format("{} (pid {}) {}", label, pid, status.Describe());
}

ProcessSupervisor::ProcessSupervisor(SupervisorOptions options)
    : options_(options), stdout_sink_(options.stdout_fd), stderr_sink_(options.stderr_fd) {
  sigemptyset(&handled_signals_);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaddset(&handled_signals_, sig);
  signal_fd_.Reset(::signalfd(-1, &handled_signals_, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!signal_fd_) {
    throw IoError(fmt::format("process supervisor: signalfd failed: {}", std::strerror(errno)));
  }
  int rc = ::pthread_sigmask(SIG_BLOCK, &handled_signals_, &saved_mask_);
  if (rc != 0) {
    throw IoError(fmt::format("process supervisor: pthread_sigmask failed: {}", std::strerror(rc)));
  }

  // With SIGCHLD ignored (or SA_NOCLDWAIT) the kernel reaps children itself
  // and waitid could never report their exit.
  ::sigaction(SIGCHLD, nullptr, &saved_sigchld_);
  if (saved_sigchld_.sa_handler == SIG_IGN || (saved_sigchld_.sa_flags & SA_NOCLDWAIT) != 0) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(SIGCHLD, &dfl, nullptr);
    restore_sigchld_ = true;
  }

  if (options_.adopt_orphans) {
    if (::prctl(PR_GET_CHILD_SUBREAPER, &saved_subreaper_) != 0 ||
        ::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
      int err = errno;
      RestoreProcessState();
      throw IoError(fmt::format("process supervisor: prctl(PR_SET_CHILD_SUBREAPER) failed: {}",
                                std::strerror(err)));
    }
    restore_subreaper_ = true;
  }
}

ProcessSupervisor::~ProcessSupervisor() {
  KillAndReapEverything();
  RestoreProcessState();
}

pid_t ProcessSupervisor::Start(const ProcessSpec& spec) {
  if (ran_) {
    throw InvalidArgument(
        fmt::format("cannot start {}: the supervisor's Run() has already been called", spec.label));
  }
  return StartChild(spec, /*replacement=*/false).pid;
}

ProcessSupervisor::Child& ProcessSupervisor::StartChild(const ProcessSpec& spec, bool replacement) {
  base::UniqueFd log_fd;
  std::string log_path;
  if (!options_.log_dir.empty()) {
    log_path = (std::filesystem::path(options_.log_dir) / LogFileName(spec.label)).string();
    const int mode = options_.append_logs || replacement ? O_APPEND : O_TRUNC;
    log_fd.Reset(::open(log_path.c_str(), O_WRONLY | O_CREAT | mode | O_CLOEXEC, 0644));
    if (!log_fd) {
      throw IoError(fmt::format("cannot create the log file of {}: {}: {}", spec.label, log_path,
                                std::strerror(errno)));
    }
  }
  StartedProcess started = StartChildProcess(spec, saved_mask_);
  auto child =
      std::make_unique<Child>(spec.label, std::move(started), &stdout_sink_, &stderr_sink_,
                              spec.prefix_output ? "[" + spec.label + "] " : std::string());
  if (log_fd) {
    child->log_fd = std::move(log_fd);
    child->log_sink = std::make_unique<OutputSink>(child->log_fd.get());
    child->stdout_log = std::make_unique<LinePrefixer>("", child->log_sink.get());
    child->stderr_log = std::make_unique<LinePrefixer>("", child->log_sink.get());
  }
  child->service = spec.service;
  child->host = spec.host;
  child->two_sigints = spec.stop_with_two_sigints;
  child->replacement = replacement;
  if (!spec.service && options_.replace_departed_workers) child->spec = spec;
  Child* c = child.get();
  // A rank launcher's output is its ranks' (their failure comes as a report).
  if (!spec.relays_rank_exec) {
    child->stderr_lines.SetObserver([c](std::string_view line) { RememberLastWords(*c, line); });
  } else {
    auto observe = [c](std::string_view line) {
      std::optional<RankFailureReport> report = ParseRankFailureReport(line);
      if (!report) return;
      std::optional<ExitStatus> status = ExitStatus::FromDescription(report->description);
      if (!status || status->success()) return;
      // A death by a signal (a crash, kill -9: rank-exec reports no death
      // that its own stop caused) is a cause; exits with a status, such as
      // the survivors' PeerLost, are usually its consequences, and over
      // TCP they may see the loss before the victim's parent sees the
      // death. So: deaths by signal first, then the earliest seen; of
      // equal times (none said), the first line.
      if (c->relayed_failure) {
        const bool killed = status->signaled;
        const bool had_killed = c->relayed_failure->status.signaled;
        if (killed != had_killed ? had_killed : report->seen_at >= c->relayed_seen_at) return;
      }
      ProcessExit failure{c->label, c->pid, *status, c->host};
      failure.relayed = std::string(report->description);
      c->relayed_failure = failure;
      c->relayed_seen_at = report->seen_at;
    };
    child->stdout_lines.SetObserver(observe);
    child->stderr_lines.SetObserver(observe);
  }
  children_.push_back(std::move(child));
  return *children_.back();
}

void ProcessSupervisor::RememberLastWords(Child& child, std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r' || line.back() == ' ')) {
    line.remove_suffix(1);
  }
  if (line.empty()) return;
  child.last_words = std::string(line.substr(0, ProcessExit::kLastWordsBytes));
}

JobOutcome ProcessSupervisor::Run() {
  if (ran_) throw InvalidArgument("ProcessSupervisor::Run() called twice");
  ran_ = true;

  std::vector<pollfd> fds;
  std::vector<std::pair<Child*, bool>> owners;  // for fds[i + 1]: the child, and stderr?
  while (true) {
    auto now = std::chrono::steady_clock::now();
    if (sweep_due_ || now - last_sweep_ >= kSweepInterval) {
      sweep_due_ = false;
      last_sweep_ = now;
      Reap(now);
      UpdateGroups();
    }
    AdvanceTearDown(now);
    SendDueSigints(now);
    KillDepartedGroups(now);
    FollowWorkerHosts(now);
    StartDueReplacements(now);
    StopUnjoinedReplacements(now);
    if (Finished()) break;

    fds.clear();
    owners.clear();
    fds.push_back({signal_fd_.get(), POLLIN, 0});
    for (auto& child : children_) {
      if (child->stdout_pipe) {
        fds.push_back({child->stdout_pipe.get(), POLLIN, 0});
        owners.emplace_back(child.get(), false);
      }
      if (child->stderr_pipe) {
        fds.push_back({child->stderr_pipe.get(), POLLIN, 0});
        owners.emplace_back(child.get(), true);
      }
    }
    int ready = ::poll(fds.data(), fds.size(), PollTimeoutMs(now));
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw IoError(fmt::format("process supervisor: poll failed: {}", std::strerror(errno)));
    }
    now = std::chrono::steady_clock::now();
    if (fds[0].revents != 0) HandleSignals(now);
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) Drain(*owners[i - 1].first, owners[i - 1].second, kReadsPerTurn);
    }
  }

  if (options_.end_adopted_orphans) EndAdoptedOrphans();

  // Every group is gone, so only a process that left its group could still
  // write: take what is in the pipes and finish the partial lines.
  for (auto& child : children_) {
    Drain(*child, false, kReadsAtExit);
    Drain(*child, true, kReadsAtExit);
    child->stdout_lines.Flush();
    child->stderr_lines.Flush();
    child->stdout_pipe.Reset();
    child->stderr_pipe.Reset();
  }

  JobOutcome outcome;
  outcome.exits = exits_;
  outcome.first_failure = first_failure_;
  outcome.interrupt_signal = interrupt_signal_;
  outcome.replacements = replacements_started_;
  if (first_failure_) {
    // The cause rather than the first end seen: a survivor's PeerLost (200)
    // can be reaped before the exit of the process whose failure it
    // reports (AttemptCause). Then the others that failed on their own.
    const ProcessExit cause = AttemptCause(outcome).value_or(*first_failure_);
    outcome.exit_code = cause.status.ShellCode();
    std::string line = "job failed: " + cause.Describe();
    if (!cause.last_words.empty()) line += ": " + cause.last_words;
    std::vector<std::string> others;
    for (const ProcessExit& e : exits_) {
      if (e.status.success() || e.torn_down || e.left ||
          (e.pid == cause.pid && e.label == cause.label)) {
        continue;
      }
      others.push_back(e.Describe());
    }
    if (!others.empty()) line += fmt::format("; then {}", fmt::join(others, ", "));
    const std::string shortfall = shortfall_.empty() ? ShortfallOfCause(cause) : shortfall_;
    if (!shortfall.empty()) line += "; " + shortfall;
    line += DeparturesClause();
    Log(line);
  } else if (interrupt_signal_ != 0) {
    outcome.exit_code = 128 + interrupt_signal_;
    Log(fmt::format("job interrupted by {}{}", SignalName(interrupt_signal_), DeparturesClause()));
  } else if (services_stuck_) {
    outcome.exit_code = base::kExitTimeout;
    Log("job failed: its services did not end after every worker had exited with status 0" +
        DeparturesClause());
  } else if (exits_.size() < children_.size()) {
    // Only a process that survived SIGKILL (stuck in the kernel) lacks an exit.
    outcome.exit_code = 1;
    Log(fmt::format("job failed: {} of {} processes could not be reaped",
                    children_.size() - exits_.size(), children_.size()));
  } else if (!departures_.empty()) {
    Log(ElasticSuccessLine(*ElasticRange(), departures_, replacements_started_));
  }
  return outcome;
}

int ProcessSupervisor::WaitForInterrupt(milliseconds duration) {
  if (!ran_ || !AllExited()) {
    throw InvalidArgument("ProcessSupervisor::WaitForInterrupt() called before Run() returned");
  }
  const auto end = std::chrono::steady_clock::now() + duration;
  while (true) {
    signalfd_siginfo info{};
    const ssize_t n = ::read(signal_fd_.get(), &info, sizeof(info));
    if (n == static_cast<ssize_t>(sizeof(info))) {
      const int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) return sig;
      continue;  // SIGCHLD of nothing we wait for, SIGPIPE
    }
    if (n < 0 && errno == EINTR) continue;
    if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
      throw IoError(fmt::format("process supervisor: reading the signalfd failed: {}",
                                n < 0 ? std::strerror(errno) : "short read"));
    }
    const auto left =
        std::chrono::ceil<milliseconds>(end - std::chrono::steady_clock::now()).count();
    if (left <= 0) return 0;
    pollfd p{signal_fd_.get(), POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
    if (ready < 0 && errno != EINTR) {
      throw IoError(fmt::format("process supervisor: poll failed: {}", std::strerror(errno)));
    }
  }
}

void ProcessSupervisor::HandleSignals(TimePoint now) {
  while (true) {
    signalfd_siginfo info{};
    ssize_t n = ::read(signal_fd_.get(), &info, sizeof(info));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n != static_cast<ssize_t>(sizeof(info))) {
      throw IoError(fmt::format("process supervisor: reading the signalfd failed: {}",
                                n < 0 ? std::strerror(errno) : "short read"));
    }
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) {
      sweep_due_ = true;
      continue;
    }
    if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP) continue;  // SIGPIPE: the sink copes

    if (interrupt_signal_ == 0) {
      // A child that died before the interruption failed on its own: reap
      // it first, as a failure. (The signalfd gives SIGTERM, 15, before a
      // SIGCHLD, 17, that was pending longer: a rank-exec that mpirun stops
      // right after its rank was killed would else report the kill as a
      // consequence of its own stop, and the launcher above would blame a
      // survivor's PeerLost.)
      Reap(now);
    }
    UpdateGroups();
    const int live = LiveGroups();
    if (interrupt_signal_ == 0) {
      interrupt_signal_ = sig;
      Log(fmt::format("received {}; forwarding it to {}; SIGKILL follows in {}{}", SignalName(sig),
                      Groups(live), Seconds(options_.kill_delay),
                      sig == SIGINT ? " (press Ctrl-C again to send it now)" : ""));
      SignalGroups(sig);
      if (phase_ == Phase::kRunning || phase_ == Phase::kGrace) {
        phase_ = Phase::kTerminating;
        deadline_ = now + options_.kill_delay;
      } else if (phase_ == Phase::kTerminating) {
        deadline_ = std::min(deadline_, now + options_.kill_delay);
      }
    } else {
      Log(fmt::format("received {} again; sending SIGKILL to {}", SignalName(sig), Groups(live)));
      SignalGroups(SIGKILL);
      if (phase_ != Phase::kKilling) {
        phase_ = Phase::kKilling;
        deadline_ = now + options_.kill_delay;
      }
    }
  }
}

void ProcessSupervisor::Reap(TimePoint now) {
  for (auto& child : children_) {
    if (child->group_gone) continue;
    while (true) {
      siginfo_t info{};
      if (::waitid(P_PGID, static_cast<id_t>(child->pid), &info, WEXITED | WNOHANG) != 0) {
        if (errno == EINTR) continue;
        break;  // ECHILD: no child of ours left in this group
      }
      if (info.si_pid == 0) break;  // children in the group, none ended yet
      if (info.si_pid == child->pid) OnExit(*child, ExitStatus::FromSiginfo(info), now);
      // Otherwise a descendant we adopted as subreaper: reaped, nothing to report.
    }
  }
}

void ProcessSupervisor::OnExit(Child& child, const ExitStatus& status, TimePoint now) {
  Drain(child, false, kReadsAtExit);
  Drain(child, true, kReadsAtExit);
  child.exited = true;
  child.finished_ok = status.success();
  child.stdin_pipe.Reset();
  ProcessExit exit{child.label, child.pid, status, child.host,
                   phase_ == Phase::kTerminating || phase_ == Phase::kKilling};
  exit.last_words = child.last_words;
  // A rank launcher that failed ends as the rank it relayed (the cause, with
  // the rank's status), so that what reads the exits (the restart decision,
  // AttemptCause) sees the rank's status rather than mpirun's or srun's.
  ProcessExit reported = exit;
  if (!status.success() && child.relayed_failure) {
    reported = *child.relayed_failure;
    reported.torn_down = exit.torn_down;
  }
  const bool job_failure =
      !status.success() && !first_failure_ && interrupt_signal_ == 0 && !services_stuck_;
  std::string description = exit.Describe();
  if (job_failure && phase_ == Phase::kRunning && !child.service) {
    // A worker of an elastic job may leave it (elastic_workers.h).
    if (const std::optional<WorkerRange> range = ElasticRange()) {
      // Below the minimum the job waits for a replacement that will come.
      const std::chrono::milliseconds wait =
          options_.replace_departed_workers && WhyNotReplace(child, reported.status).empty()
              ? options_.elastic_timeout
              : std::chrono::milliseconds(0);
      const WorkerLoss loss = DecideWorkerLoss(*range, absent_workers_, description, wait);
      if (loss.tolerated) {
        reported.left = true;
        exits_.push_back(reported);
        departures_.push_back(reported.Describe());
        ++absent_workers_;
        Log(loss.report);
        StopDepartedGroup(child, now);
        ScheduleReplacement(child, reported.status, now);
        return;
      }
      description = loss.report;
      shortfall_ = loss.shortfall;
    }
  }
  exits_.push_back(reported);
  if (job_failure) {
    // A rank launcher's failure is that of the first rank that reported one.
    first_failure_ = reported;
    if (phase_ == Phase::kRunning) {
      Log(options_.stamp_first_failure
              ? fmt::format("{}{}{:.3f}){}", description, kSeenAt, WallClockSeconds(), kTearingDown)
              : fmt::format("{}{}", description, kTearingDown));
      phase_ = Phase::kGrace;
      deadline_ = now + options_.teardown_grace;
      return;
    }
  }
  Log(exit.Describe());
}

std::optional<WorkerRange> ProcessSupervisor::ElasticRange() const {
  const int workers =
      static_cast<int>(std::count_if(children_.begin(), children_.end(),
                                     [](const auto& c) { return !c->service && !c->replacement; }));
  if (!IsElastic(options_.min_workers, workers)) return std::nullopt;
  return WorkerRange{options_.min_workers, workers};
}

const ProcessSupervisor::Child* ProcessSupervisor::FinishedWorker() const {
  for (const auto& c : children_) {
    if (!c->service && c->exited && c->finished_ok) return c.get();
  }
  return nullptr;
}

std::string ProcessSupervisor::WhyNotReplace(const Child& child, const ExitStatus& status) const {
  if (!child.spec) return "it has no process spec";
  switch (ClassifyFailure(
      options_.replace_after_any_failure ? RestartPolicy::kOnFailure : RestartPolicy::kExitCode,
      status)) {
    case FailureRetry::kSetup:
      return fmt::format(
          "its exit status {} names a problem of the job's set-up, which a new "
          "process would meet again",
          status.code);
    case FailureRetry::kPermanent:
      return "exit codes 1..127 are not retried under --restart-policy exit-code (on-failure "
             "retries them)";
    case FailureRetry::kRetry:
      break;
  }
  const int used = replacements_started_ + static_cast<int>(pending_replacements_.size());
  if (used >= options_.max_replacements) {
    return fmt::format("no replacement left ({} of {} used)", used, options_.max_replacements);
  }
  if (const Child* done = FinishedWorker()) {
    return fmt::format("{} has finished, so the job is ending", done->label);
  }
  return {};
}

void ProcessSupervisor::ScheduleReplacement(const Child& child, const ExitStatus& status,
                                            TimePoint now) {
  if (!options_.replace_departed_workers || !child.spec) return;
  const std::string why_not = WhyNotReplace(child, status);
  if (!why_not.empty()) {
    Log(fmt::format("not replacing {}: {}", child.label, why_not));
    return;
  }
  const int number = replacements_started_ + static_cast<int>(pending_replacements_.size()) + 1;
  pending_replacements_.push_back({*child.spec, now + options_.replacement_delay});
  Log(fmt::format(
      "starting a replacement for {} in {} (replacement {} of {}); it joins the "
      "running job at the workers' next commit",
      child.label, Seconds(options_.replacement_delay), number, options_.max_replacements));
}

void ProcessSupervisor::StopUnjoinedReplacements(TimePoint now) {
  if (replacements_started_ == 0 || phase_ != Phase::kRunning || interrupt_signal_ != 0) return;
  std::vector<Child*> running;
  for (auto& c : children_) {
    if (c->service || c->exited) continue;
    if (!c->replacement) return;  // a worker of the job is still at work
    running.push_back(c.get());
  }
  if (running.empty() || FinishedWorker() == nullptr) return;
  if (!unjoined_deadline_) unjoined_deadline_ = now + options_.teardown_grace;
  if (now < *unjoined_deadline_) return;
  for (Child* c : running) {
    if (c->stopped_unjoined) continue;
    c->stopped_unjoined = true;
    Log(fmt::format(
        "{} (pid {}), a replacement, is still running {} after every other worker ended: it did "
        "not join before the job ended; sending SIGTERM (SIGKILL follows in {})",
        c->label, c->pid, Seconds(options_.teardown_grace), Seconds(options_.kill_delay)));
    TerminateGroup(*c, now);
  }
}

void ProcessSupervisor::FollowWorkerHosts(TimePoint now) {
  if (options_.worker_hosts == nullptr) return;
  if (auto error = options_.worker_hosts->TakeError()) {
    Log(fmt::format("host discovery failed: {}; the hosts stay {}", *error,
                    hosts_ ? DescribeHosts(*hosts_) : std::string("as they were")));
  }
  std::optional<std::vector<HostSlots>> changed = options_.worker_hosts->Changed();
  if (!changed) return;
  if (hosts_) {
    Log(fmt::format("the discovered hosts are now {} (were {})", DescribeHosts(*changed),
                    DescribeHosts(*hosts_)));
  }
  hosts_ = std::move(*changed);
  if (phase_ != Phase::kRunning || interrupt_signal_ != 0) return;
  std::map<std::string, int> slots;
  for (const auto& h : *hosts_) slots[h.host] = h.slots;
  std::map<std::string, int> kept;
  for (auto& c : children_) {  // in start order: the oldest keep the slots
    if (c->service || c->exited || c->stopped_for_host || c->stopped_unjoined) continue;
    const auto listed = slots.find(c->host);
    if (listed != slots.end() && kept[c->host] < listed->second) {
      ++kept[c->host];
      continue;
    }
    c->stopped_for_host = true;
    Log(fmt::format(
        "{} on {} (pid {}) has no slot among the discovered hosts ({}): sending SIGTERM, it "
        "leaves the job (SIGKILL follows in {})",
        c->label, c->host, c->pid,
        listed == slots.end() ? c->host + " is no longer listed"
                              : fmt::format("{} has {} slot{}", c->host, listed->second,
                                            listed->second == 1 ? "" : "s"),
        Seconds(options_.kill_delay)));
    TerminateGroup(*c, now);
  }
}

std::optional<HostSlots> ProcessSupervisor::FreeWorkerHost() const {
  if (!hosts_) return std::nullopt;
  for (const auto& h : *hosts_) {
    int used = 0;
    for (const auto& c : children_) {
      if (!c->service && !c->exited && c->host == h.host) ++used;
    }
    if (used < h.slots) return h;
  }
  return std::nullopt;
}

void ProcessSupervisor::StartDueReplacements(TimePoint now) {
  for (auto it = pending_replacements_.begin(); it != pending_replacements_.end();) {
    const std::string& label = it->spec.label;
    std::string why_not;
    if (phase_ != Phase::kRunning || interrupt_signal_ != 0) {
      why_not = "the job is being torn down";
    } else if (const Child* done = FinishedWorker()) {
      why_not = fmt::format("{} has finished, so the job is ending", done->label);
    } else if (now < it->due) {
      ++it;
      continue;
    }
    std::optional<HostSlots> host;
    if (why_not.empty() && options_.worker_hosts != nullptr) {
      host = FreeWorkerHost();
      if (!host) {
        if (!it->waiting_for_host) {
          it->waiting_for_host = true;
          Log(
              fmt::format("no discovered host has a free slot for {} ({}): it starts when one "
                          "has",
                          label, hosts_ ? DescribeHosts(*hosts_) : std::string("no hosts")));
        }
        ++it;
        continue;
      }
    }
    if (why_not.empty()) {
      try {
        // The place's spec, on its new host when the hosts are discovered;
        // TANDEM_RESTART_COUNT: the restarts made before this process started.
        const ProcessSpec place = host ? options_.worker_hosts->MoveTo(it->spec, *host) : it->spec;
        ProcessSpec spec = place;
        if (auto count = spec.env.find("TANDEM_RESTART_COUNT"); count != spec.env.end()) {
          count->second =
              std::to_string(std::atoi(count->second.c_str()) + replacements_started_ + 1);
        }
        Child& started = StartChild(spec, /*replacement=*/true);
        started.spec = place;  // its own replacement counts from the place's spec
        ++replacements_started_;
        --absent_workers_;
        Log(fmt::format("started the replacement for {}{} (pid {}, replacement {} of {})", label,
                        host ? " on " + host->host : std::string(), started.pid,
                        replacements_started_, options_.max_replacements));
      } catch (const Error& e) {
        Log(fmt::format("could not start the replacement for {}: {}", label, e.what()));
      }
    } else {
      Log(fmt::format("not starting the replacement for {}: {}", label, why_not));
    }
    it = pending_replacements_.erase(it);
  }
}

void ProcessSupervisor::StopDepartedGroup(Child& child, TimePoint now) {
  if (::kill(-child.pid, 0) != 0) return;  // gone with its leader (ESRCH)
  Log(fmt::format("sending SIGTERM to what {} left in its process group (SIGKILL follows in {})",
                  child.label, Seconds(options_.kill_delay)));
  TerminateGroup(child, now);
}

void ProcessSupervisor::TerminateGroup(Child& child, TimePoint now) {
  ::kill(-child.pid, SIGTERM);
  ::kill(-child.pid, SIGCONT);  // a stopped group must run to act on it
  child.departed_kill_at = now + options_.kill_delay;
}

void ProcessSupervisor::KillDepartedGroups(TimePoint now) {
  for (auto& child : children_) {
    if (!child->departed_kill_at || now < *child->departed_kill_at) continue;
    child->departed_kill_at.reset();
    if (!child->group_gone) ::kill(-child->pid, SIGKILL);
  }
}

std::string ProcessSupervisor::ShortfallOfCause(const ProcessExit& cause) const {
  const std::optional<WorkerRange> range = ElasticRange();
  if (!range || cause.left || !cause.relayed.empty()) return {};
  const bool worker = std::any_of(children_.begin(), children_.end(), [&](const auto& c) {
    return c->pid == cause.pid && c->label == cause.label && !c->service;
  });
  if (!worker) return {};
  return DecideWorkerLoss(*range, absent_workers_, cause.Describe()).shortfall;
}

std::string ProcessSupervisor::DeparturesClause() const {
  return departures_.empty() ? std::string()
                             : "; had left the job: " + DescribeDepartures(departures_);
}

bool ProcessSupervisor::ServicesOutlivedTheJob(TimePoint now) {
  bool any_worker = false;
  bool service_running = false;
  for (const auto& c : children_) {
    if (c->service) {
      service_running = service_running || !c->exited;
    } else {
      if (!c->exited) return false;
      any_worker = true;
    }
  }
  // (A worker that failed moved the job to kGrace or, in an elastic job,
  // left it: the others all succeeded.)
  if (!any_worker || !service_running) return false;
  if (!services_deadline_) services_deadline_ = now + options_.teardown_grace;
  return now >= *services_deadline_;
}

void ProcessSupervisor::UpdateGroups() {
  for (auto& child : children_) {
    // While the leader is unreaped its group exists; afterwards the group
    // lives as long as any member does.
    if (!child->exited || child->group_gone) continue;
    if (::kill(-child->pid, 0) != 0 && errno == ESRCH) child->group_gone = true;
  }
}

void ProcessSupervisor::AdvanceTearDown(TimePoint now) {
  switch (phase_) {
    case Phase::kRunning:
    case Phase::kGrace:
      if (AllExited() && LiveGroups() > 0) {
        Log(
            fmt::format("every process of the job has exited, but {} still {} other processes; "
                        "sending SIGTERM (SIGKILL follows in {})",
                        Groups(LiveGroups()), LiveGroups() == 1 ? "holds" : "hold",
                        Seconds(options_.kill_delay)));
        SignalGroups(SIGTERM);
        phase_ = Phase::kTerminating;
        deadline_ = now + options_.kill_delay;
      } else if (phase_ == Phase::kRunning && ServicesOutlivedTheJob(now)) {
        std::string running;
        for (const auto& c : children_) {
          if (c->exited) continue;
          running += (running.empty() ? "" : ", ") + c->label;
        }
        Log(fmt::format(
            "every worker exited with status 0, but {} {} still running after {}: the job did "
            "not end (did every worker join it and finalize? A worker that exits without "
            "joining leaves the scheduler waiting for it until TANDEM_START_TIMEOUT); sending "
            "SIGTERM (SIGKILL follows in {})",
            running, running.find(',') == std::string::npos ? "is" : "are",
            Seconds(options_.teardown_grace), Seconds(options_.kill_delay)));
        services_stuck_ = true;
        SignalGroups(SIGTERM);
        phase_ = Phase::kTerminating;
        deadline_ = now + options_.kill_delay;
      } else if (phase_ == Phase::kGrace && now >= deadline_) {
        const int running = static_cast<int>(std::count_if(
            children_.begin(), children_.end(), [](const auto& c) { return !c->exited; }));
        Log(fmt::format(
            "{} still running after the grace period of {}; sending SIGTERM to {} "
            "(SIGKILL follows in {})",
            running == 1 ? "1 process" : fmt::format("{} processes", running),
            Seconds(options_.teardown_grace), Groups(LiveGroups()), Seconds(options_.kill_delay)));
        SignalGroups(SIGTERM);
        phase_ = Phase::kTerminating;
        deadline_ = now + options_.kill_delay;
      }
      break;
    case Phase::kTerminating:
      if (now >= deadline_) {
        if (LiveGroups() > 0) {
          Log(fmt::format("{} still present {} after SIGTERM; sending SIGKILL",
                          Groups(LiveGroups()), Seconds(options_.kill_delay)));
          SignalGroups(SIGKILL);
        }
        phase_ = Phase::kKilling;
        deadline_ = now + options_.kill_delay;
      }
      break;
    case Phase::kKilling:
      // Repeated, in case a member forked while the previous SIGKILL was
      // being delivered; harmless otherwise.
      SignalGroups(SIGKILL);
      if (now >= deadline_) {
        for (auto& child : children_) {
          if (child->group_gone) continue;
          Log(
              fmt::format("process group {} of {} still exists {} after SIGKILL (a process stuck "
                          "in the kernel?); giving up on it",
                          child->pid, child->label, Seconds(options_.kill_delay)));
          child->exited = true;
          child->group_gone = true;
        }
      }
      break;
  }
}

int ProcessSupervisor::SignalGroups(int signal) {
  int signalled = 0;
  for (auto& child : children_) {
    if (child->group_gone) continue;
    const bool twice = child->two_sigints && signal != SIGKILL;
    if (twice && !child->second_sigint_at) {
      child->second_sigint_at = std::chrono::steady_clock::now() + kSecondSigintDelay;
    }
    if (::kill(-child->pid, twice ? SIGINT : signal) == 0) {
      ++signalled;
      // A stopped (frozen) process acts on SIGTERM only once continued, as a
      // shell's `kill` does for a stopped job; else it waits for SIGKILL.
      if (signal != SIGKILL) ::kill(-child->pid, SIGCONT);
    } else if (errno == ESRCH && child->exited) {
      child->group_gone = true;
    }
  }
  return signalled;
}

void ProcessSupervisor::SendDueSigints(TimePoint now) {
  for (auto& child : children_) {
    if (!child->second_sigint_at || now < *child->second_sigint_at) continue;
    if (!child->group_gone) ::kill(-child->pid, SIGINT);
    // Done: a later stop sends one SIGINT (srun is cancelling its step already).
    child->second_sigint_at = TimePoint::max();
  }
}

int ProcessSupervisor::LiveGroups() const {
  return static_cast<int>(std::count_if(children_.begin(), children_.end(),
                                        [](const auto& c) { return !c->group_gone; }));
}

bool ProcessSupervisor::AllExited() const {
  return std::all_of(children_.begin(), children_.end(), [](const auto& c) { return c->exited; });
}

bool ProcessSupervisor::Finished() const {
  return AllExited() && LiveGroups() == 0 && pending_replacements_.empty();
}

void ProcessSupervisor::Drain(Child& child, bool from_stderr, int max_reads) {
  base::UniqueFd& pipe = from_stderr ? child.stderr_pipe : child.stdout_pipe;
  LinePrefixer& lines = from_stderr ? child.stderr_lines : child.stdout_lines;
  LinePrefixer* log = from_stderr ? child.stderr_log.get() : child.stdout_log.get();
  char buffer[64 * 1024];
  for (int i = 0; i < max_reads && pipe; ++i) {
    ssize_t n = ::read(pipe.get(), buffer, sizeof(buffer));
    if (n > 0) {
      lines.Append(std::string_view(buffer, static_cast<size_t>(n)));
      if (log != nullptr) log->Append(std::string_view(buffer, static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    // End of stream (every writer is gone) or an error reading it.
    lines.Flush();
    if (log != nullptr) log->Flush();
    pipe.Reset();
  }
}

void ProcessSupervisor::Log(const std::string& text) {
  stderr_sink_.WriteLine(fmt::format("[{}] {}\n", options_.log_tag, text));
}

int ProcessSupervisor::PollTimeoutMs(TimePoint now) const {
  milliseconds wait = kSweepInterval;
  if (phase_ != Phase::kRunning) {
    auto left = std::chrono::ceil<milliseconds>(deadline_ - now);
    wait = std::clamp(left, milliseconds(0), wait);
  }
  for (const auto& pending : pending_replacements_) {
    if (pending.waiting_for_host) continue;  // the sweep's turns look again
    auto left = std::chrono::ceil<milliseconds>(pending.due - now);
    wait = std::clamp(left, milliseconds(0), wait);
  }
  for (const auto& child : children_) {
    if (!child->second_sigint_at || *child->second_sigint_at == TimePoint::max()) continue;
    auto left = std::chrono::ceil<milliseconds>(*child->second_sigint_at - now);
    wait = std::clamp(left, milliseconds(0), wait);
  }
  return static_cast<int>(wait.count());
}

void ProcessSupervisor::KillAndReapEverything() {
  for (auto& child : children_) {
    if (child->group_gone) continue;
    ::kill(-child->pid, SIGKILL);
    if (!child->exited) {
      siginfo_t info{};
      while (::waitid(P_PID, static_cast<id_t>(child->pid), &info, WEXITED) != 0 &&
             errno == EINTR) {
      }
      child->exited = true;
    }
  }
  // The rest of each group dies of the SIGKILL too; descendants we adopted
  // must still be reaped before their group is gone. Bounded: a process
  // stuck in the kernel is left behind rather than hanging the destructor.
  const auto end = std::chrono::steady_clock::now() + options_.kill_delay;
  while (LiveGroups() > 0 && std::chrono::steady_clock::now() < end) {
    for (auto& child : children_) {
      if (child->group_gone) continue;
      while (true) {
        siginfo_t info{};
        if (::waitid(P_PGID, static_cast<id_t>(child->pid), &info, WEXITED | WNOHANG) != 0 ||
            info.si_pid == 0) {
          break;
        }
      }
    }
    UpdateGroups();
    if (LiveGroups() > 0) ::usleep(5000);
  }
}

void ProcessSupervisor::EndAdoptedOrphans() {
  // Our children: the processes whose parent (the 4th field of
  // /proc/PID/stat, after the command's closing parenthesis) is us.
  std::vector<pid_t> orphans;
  const pid_t self = ::getpid();
  std::error_code ec;
  // Processes come and go while we look: an entry that vanished, or whose
  // stat cannot be read any more (ESRCH), is skipped, never an error.
  for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = ReadProcStat(it->path() / "stat");
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    char state = 0;
    long parent = 0;
    if (std::sscanf(stat.c_str() + paren + 1, " %c %ld", &state, &parent) != 2) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (parent != self || std::any_of(children_.begin(), children_.end(),
                                      [pid](const auto& c) { return c->pid == pid; })) {
      continue;
    }
    orphans.push_back(pid);
  }
  for (pid_t pid : orphans) ::kill(pid, SIGKILL);
  for (pid_t pid : orphans) {
    // SIGKILL ends it unless it is stuck in the kernel; then give up after
    // kill_delay rather than hang.
    const auto end = std::chrono::steady_clock::now() + options_.kill_delay;
    siginfo_t info{};
    while (true) {
      info.si_pid = 0;
      if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG) != 0) {
        if (errno == EINTR) continue;
        break;  // ECHILD: reaped already
      }
      if (info.si_pid == pid) {
        Log(fmt::format("reaped pid {}, a process of the job whose parent had died ({})", pid,
                        ExitStatus::FromSiginfo(info).Describe()));
        break;
      }
      if (std::chrono::steady_clock::now() >= end) {
        Log(
            fmt::format("pid {}, an orphaned process of the job, is still there {} after "
                        "SIGKILL; giving up on it",
                        pid, Seconds(options_.kill_delay)));
        break;
      }
      ::usleep(5000);
    }
  }
}

void ProcessSupervisor::RestoreProcessState() {
  if (restore_subreaper_) {
    ::prctl(PR_SET_CHILD_SUBREAPER, saved_subreaper_);
    restore_subreaper_ = false;
  }
  if (restore_sigchld_) {
    ::sigaction(SIGCHLD, &saved_sigchld_, nullptr);
    restore_sigchld_ = false;
  }
  // Consume what is pending, so that unblocking cannot deliver a late
  // SIGINT or SIGPIPE with its default action.
  if (signal_fd_) {
    signalfd_siginfo info{};
    while (::read(signal_fd_.get(), &info, sizeof(info)) > 0) {
    }
    signal_fd_.Reset();
  }
  ::pthread_sigmask(SIG_SETMASK, &saved_mask_, nullptr);
}

}  // namespace tandem::launch
