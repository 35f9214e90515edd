// The process supervisor: runs the processes of one job on this host and
// ends them together.
//
// What it guarantees (docs/launch.md is the user's description):
//  - Output: every line a process writes to stdout or stderr reaches the
//    launcher's stdout or stderr whole, prefixed "[<label>] ".
//  - Tear-down: when a process fails (non-zero exit or a signal) the others
//    get `teardown_grace` to exit on their own (tandem processes notice the
//    lost peer and say so), then every process group left gets SIGTERM, and
//    `kill_delay` later SIGKILL.
//  - Elastic worker counts (SupervisorOptions::min_workers,
//    elastic_workers.h): a worker (a process that is not a service) that
//    fails while nothing else has, and whose loss leaves at least
//    min_workers of the workers that have not left, leaves the job: one
//    line says so, whatever it left in its process group gets SIGTERM
//    (SIGKILL `kill_delay` later), and the others go on. A loss below the
//    minimum tears the job down as any failure does. With
//    replace_departed_workers the worker's place gets a new process from
//    the same spec (docs/elastic.md, "The launcher's replacements").
//  - Signals: SIGINT, SIGTERM and SIGHUP sent to the launcher are forwarded
//    to every process group at once, SIGKILL follows `kill_delay` later; a
//    second such signal sends SIGKILL at once. A signal the launcher
//    inherited as ignored (SIGHUP under nohup) stays ignored, by it and by
//    the job.
//  - No orphans: each process leads its own process group, dies with the
//    launcher (PR_SET_PDEATHSIG), and Run() returns only when every group
//    it created is gone, so descendants that stayed in their group are gone
//    too. Processes that leave their group (setsid, setpgid) are out of
//    reach, as with any process-group-based supervisor.
//  - Exit code: 0 when every process exited 0 (or, in an elastic job, left
//    it); else the first failed process's code (128 + signal for a signal);
//    128 + signal when the
//    launcher was interrupted before anything failed (130 for Ctrl-C).
//    For a rank launcher (mpirun, srun: ProcessSpec::relays_rank_exec) the
//    first failed process is the first rank whose `tandem rank-exec`
//    reported its failure (RankFailureReport), with that rank's code.
//
// Mechanics: one thread, one poll() loop over a signalfd (SIGCHLD, SIGINT,
// SIGTERM, SIGHUP, SIGPIPE), the children's output pipes and the tear-down
// deadlines. Processes are reaped per process group with
// waitid(P_PGID, ...), which collects the direct child and any descendant
// of its group the launcher adopted as child subreaper, and never touches
// other children of the process.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/unique_fd.h"
#include "launch/child_process.h"
#include "launch/elastic_workers.h"
#include "launch/exit_status.h"
#include "launch/hostfile.h"
#include "launch/prefixed_output.h"

namespace tandem::launch {

/// Where an elastic job's workers may run, as it changes while the job runs
/// (--host-discovery-script: host_discovery.h, docs/launch.md "Hosts from a
/// discovery script"). Used by the supervisor's thread only.
class WorkerHosts {
 public:
  virtual ~WorkerHosts() = default;
  /// The hosts and their worker slots when they changed since the last call
  /// (the first call: the hosts the job started on); else nothing. Must not
  /// block.
  virtual std::optional<std::vector<HostSlots>> Changed() = 0;
  /// Why the latest look-up failed, once per failure; the hosts stay as
  /// they were.
  virtual std::optional<std::string> TakeError() = 0;
  /// `worker`, a worker's spec, made to run on `host` instead of its own
  /// (the same label, rank and contract). May throw Error.
  virtual ProcessSpec MoveTo(const ProcessSpec& worker, const HostSlots& host) = 0;
};

/// How the supervisor tears a job down and where output goes.
struct SupervisorOptions {
  /// After the first failure: how long the other processes may take to exit
  /// on their own before their process groups get SIGTERM. Also how long
  /// services (ProcessSpec::service) may outlive the other processes' clean
  /// exits before the job is torn down as stuck (exit code 201).
  std::chrono::milliseconds teardown_grace{std::chrono::seconds(10)};
  /// After SIGTERM, or a signal forwarded from the launcher: how long before
  /// SIGKILL. Also how long to wait for a group to vanish after SIGKILL
  /// before giving up on it.
  std::chrono::milliseconds kill_delay{std::chrono::seconds(5)};
  /// Where the children's stdout lines go (not owned; must stay open).
  int stdout_fd = STDOUT_FILENO;
  /// Where the children's stderr lines and the launcher's own "[launcher]"
  /// lines go (not owned; must stay open).
  int stderr_fd = STDERR_FILENO;
  /// Makes this process a child subreaper (PR_SET_CHILD_SUBREAPER) while the
  /// supervisor lives, so that descendants orphaned inside a job's process
  /// groups become its children and are reaped by it, instead of waiting
  /// for init to reap them (the process group exists until they are).
  bool adopt_orphans = true;
  /// When not empty: every process's output also goes, unprefixed and with
  /// its stdout and stderr lines interleaved as they arrive, to
  /// `<log_dir>/<label>.log` with the label's spaces as dashes
  /// ("worker-3.log"), created or truncated by Start. The directory must
  /// exist. docs/launch.md, "Per-process log files".
  std::string log_dir;
  /// The tag of the supervisor's own lines ("[launcher] job failed: ...");
  /// `tandem rank-exec` uses kRankExecLogTag, so that a rank launcher's
  /// supervisor can tell its ranks' reports from its own.
  std::string log_tag = "launcher";
  /// Once the job is over (before Run returns), SIGKILL and reap every
  /// child of this process that the supervisor did not start: orphans it
  /// adopted as child subreaper from process groups it does not watch (the
  /// process of a rank whose `tandem rank-exec` mpirun killed before it
  /// could reap it), which would otherwise stay as zombies of init. Only
  /// for a process whose children are all the supervisor's (the launcher,
  /// rank-exec); requires adopt_orphans.
  bool end_adopted_orphans = false;
  /// The line that reports the first failure gives the wall-clock time it
  /// was seen: "... (SIGKILL) (seen at 1763906457.421); tearing down the
  /// job". `tandem rank-exec` sets it, so that the launcher above can tell
  /// which rank failed first (ParseRankFailureReport).
  bool stamp_first_failure = false;
  /// Append to existing log files instead of truncating them: the later
  /// attempts of a restarted job (job_restarts.h) keep the earlier ones'
  /// output.
  bool append_logs = false;
  /// Elastic worker counts (--workers MIN:MAX, elastic_workers.h): with
  /// 1 <= min_workers < the number of workers started (the processes that
  /// are not services), a worker that fails leaves the job instead of
  /// failing it while at least min_workers workers have not left. 0: every
  /// failure fails the job.
  int min_workers = 0;
  /// Replacing workers that left an elastic job (--max-restarts in an
  /// elastic job without servers, whose running job admits new workers:
  /// docs/elastic.md, "Workers that join"): when true, a worker that left
  /// is started again from its ProcessSpec (the same label, environment and
  /// log file, appended to; TANDEM_RESTART_COUNT, when set, raised by the
  /// replacement's number) `replacement_delay` later, while fewer than
  /// `max_replacements` replacements were started, its end is one a restart
  /// may follow (`replace_after_any_failure`), and no worker has finished
  /// (exited with status 0) meanwhile. A replacement still running
  /// `teardown_grace` after every other worker ended (one of them with
  /// status 0) did not join before the job ended: it gets SIGTERM and
  /// leaves. Requires min_workers elastic.
  bool replace_departed_workers = false;
  /// How many replacements this supervisor may start in all, >= 0.
  int max_replacements = 0;
  /// How long after a worker left its replacement starts.
  std::chrono::milliseconds replacement_delay{1000};
  /// Which ends a replacement may follow, as --restart-policy: false
  /// (exit-code) a signal or a retryable exit code 128..255; true
  /// (on-failure) any failure. Never the set-up codes (2, 76, 77, 78, 126,
  /// 127), which a new process would meet again.
  bool replace_after_any_failure = false;
  /// With replace_departed_workers: a failure that leaves fewer than
  /// min_workers (at least one) does not fail the job when a replacement
  /// for the worker will start: the job waits this long for it to join
  /// (the scheduler's TANDEM_ELASTIC_TIMEOUT, --elastic-timeout), and the
  /// scheduler fails it at the time-out. 0: such a loss fails the job.
  std::chrono::milliseconds elastic_timeout{0};
  /// The hosts of an elastic job's workers as they change (not owned; must
  /// outlive Run), or nullptr. With it, a worker on a host that is no
  /// longer listed, or beyond its host's slots (the newest first), gets
  /// SIGTERM and leaves the job (SIGKILL `kill_delay` later), and a
  /// replacement (replace_departed_workers) starts on the first listed host
  /// with a free slot (WorkerHosts::MoveTo), waiting while none has one.
  WorkerHosts* worker_hosts = nullptr;
};

/// The tag of `tandem rank-exec`'s own lines: "[rank-exec] job failed: ...".
inline constexpr std::string_view kRankExecLogTag = "rank-exec";

/// rank-exec's report of its process's failure, read from a line.
struct RankFailureReport {
  /// "worker 1 on h2 (pid 4711) killed by signal 9 (SIGKILL)"
  std::string_view description;
  /// When rank-exec saw the failure (seconds since the epoch); infinity
  /// when the line does not say.
  double seen_at = std::numeric_limits<double>::infinity();
};

/// The report in `line`, if it is one: the line rank-exec writes the moment
/// the failure is seen, "[rank-exec] DESCRIPTION (seen at 1763906457.421);
/// tearing down the job" (SupervisorOptions::stamp_first_failure), or its
/// last one, "[rank-exec] job failed: DESCRIPTION". A rank launcher relays
/// the reports of ranks on different hosts in no particular order (a
/// survivor's on the launcher's host often before the victim's from
/// another), so the supervisor takes a death by a signal before an exit
/// with a status (a killed or crashed rank is the cause, the survivors'
/// PeerLost exits its consequences, which TCP may show them before the
/// victim's parent sees the death), then the earliest `seen_at`. Any
/// thread.
std::optional<RankFailureReport> ParseRankFailureReport(std::string_view line);

/// The log file name of a process labelled `label` ("worker 3" ->
/// "worker-3.log"): spaces and slashes become dashes. Any thread.
std::string LogFileName(std::string_view label);

/// The end of one process of the job. Thread-safety: a value type.
struct ProcessExit {
  std::string label;
  pid_t pid = -1;
  ExitStatus status;
  std::string host;  ///< ProcessSpec::host
  /// It ended after the supervisor had signalled the job's process groups
  /// (SIGTERM or SIGKILL of the tear-down, or a forwarded interrupt): its
  /// end may be the supervisor's doing rather than a cause of the failure.
  bool torn_down = false;
  /// For the failure of a rank that a rank launcher relayed
  /// (ProcessSpec::relays_rank_exec): rank-exec's description of it
  /// ("worker 2 on h2 (pid 4711) killed by signal 9 (SIGKILL)"); `status`
  /// is then the rank's, label and pid the rank launcher's.
  std::string relayed;
  /// The last line it wrote to its standard error, if any (at most
  /// kLastWordsBytes): a tandem process's or an example's error message, a
  /// Python traceback's last line. The launcher's final line quotes it.
  std::string last_words;
  static constexpr size_t kLastWordsBytes = 400;
  /// A worker of an elastic job that failed and left it, the job going on
  /// (SupervisorOptions::min_workers): not a failure of the job, nor its
  /// cause (AttemptCause).
  bool left = false;

  /// "worker 2 (pid 4711) killed by signal 9 (SIGKILL)", and with a host
  /// "worker 2 on h2 (pid 4711) ..." (the pid is the launcher's process,
  /// e.g. ssh); `relayed` when set.
  std::string Describe() const;
};

/// What Run() observed. Thread-safety: a value type.
struct JobOutcome {
  /// The launcher's exit code (see the file comment).
  int exit_code = 0;
  /// Every started process that was reaped, in the order they ended.
  std::vector<ProcessExit> exits;
  /// The first process that failed before the launcher was interrupted,
  /// leaving out the workers that left an elastic job (ProcessExit::left).
  std::optional<ProcessExit> first_failure;
  /// The first SIGINT, SIGTERM or SIGHUP the launcher received, or 0.
  int interrupt_signal = 0;
  /// The replacements of departed workers started
  /// (SupervisorOptions::replace_departed_workers).
  int replacements = 0;
};

/// Starts, watches and ends the processes of one job.
///
/// Thread-safety: one thread. The thread that constructs the supervisor must
/// call Start and Run and destroy it: the signal mask is per thread, and
/// children die when the thread that started them ends. The constructor
/// blocks SIGCHLD, SIGINT, SIGTERM, SIGHUP and SIGPIPE in that thread; any
/// other thread of the process must block them too (build the supervisor
/// before starting threads, or have none), or the kernel may hand those
/// signals to a thread that does not expect them.
class ProcessSupervisor {
 public:
  /// Takes over the signals above (restored by the destructor), resets a
  /// SIGCHLD disposition of SIG_IGN to the default (else children would
  /// vanish unreaped) and, with adopt_orphans, becomes a child subreaper.
  /// Throws IoError when the signalfd cannot be made.
  explicit ProcessSupervisor(SupervisorOptions options = {});

  /// Kills (SIGKILL) every process group still present (when Run was not
  /// called or did not finish), reaps the children, and restores the signal
  /// mask, the SIGCHLD disposition and the subreaper flag. Signals that
  /// arrived after Run returned are discarded.
  ~ProcessSupervisor();

  ProcessSupervisor(const ProcessSupervisor&) = delete;
  ProcessSupervisor& operator=(const ProcessSupervisor&) = delete;

  /// Starts `spec` (see StartChildProcess) and returns its pid, which is
  /// also its process group id. A worker's spec (not a service) is kept for
  /// its replacement (SupervisorOptions::replace_departed_workers).
  /// Requires: Run has not been called. Throws
  /// InvalidArgument or IoError when the process cannot be started or its
  /// log file (SupervisorOptions::log_dir) cannot be created;
  /// processes started before stay running (the destructor kills them).
  pid_t Start(const ProcessSpec& spec);

  /// Supervises the started processes until every one has ended and every
  /// process group created is gone; writes their output and the launcher's
  /// reports meanwhile and returns the outcome. Throws InvalidArgument when
  /// called a second time, IoError when poll or the signalfd fail (the
  /// destructor then kills what is left).
  JobOutcome Run();

  /// How many departed workers this supervisor may replace: the budget of
  /// SupervisorOptions::max_replacements when replace_departed_workers,
  /// else 0. Any thread.
  int max_replacements() const {
    return options_.replace_departed_workers ? options_.max_replacements : 0;
  }

  /// Waits `duration`, or less when SIGINT, SIGTERM or SIGHUP arrives (also
  /// one that arrived since Run returned), and returns that signal, or 0
  /// when none came. Nothing is signalled: every process is gone. Used
  /// between the attempts of a restarted job (job_restarts.h). Requires:
  /// Run has returned. Throws InvalidArgument before Run, IoError when poll
  /// or the signalfd fail.
  int WaitForInterrupt(std::chrono::milliseconds duration);

 private:
  struct Child;
  enum class Phase {
    kRunning,      // nothing failed, nothing interrupted
    kGrace,        // a process failed; the others may exit on their own until deadline_
    kTerminating,  // SIGTERM (or a forwarded signal) sent; SIGKILL at deadline_
    kKilling,      // SIGKILL sent; give up on groups still present at deadline_
  };
  using TimePoint = std::chrono::steady_clock::time_point;

  void HandleSignals(TimePoint now);
  void Reap(TimePoint now);
  void OnExit(Child& child, const ExitStatus& status, TimePoint now);
  // The worker counts of an elastic job (SupervisorOptions::min_workers and
  // the workers started), or nothing when the job is not elastic.
  std::optional<WorkerRange> ElasticRange() const;
  // Starts a process (Start's work); `replacement`: a departed worker's
  // replacement, started while Run runs, its log file appended to.
  Child& StartChild(const ProcessSpec& spec, bool replacement);
  // Why `child`, ended with `status`, gets no replacement (the policy, the
  // budget, a finished worker); empty when it would get one.
  std::string WhyNotReplace(const Child& child, const ExitStatus& status) const;
  // After `child` left an elastic job: schedules its replacement, or says
  // why there is none (SupervisorOptions::replace_departed_workers).
  void ScheduleReplacement(const Child& child, const ExitStatus& status, TimePoint now);
  // Starts the replacements that are due, or drops them when the job is
  // ending (a failure, an interrupt, a worker that finished).
  void StartDueReplacements(TimePoint now);
  // The first worker that exited with status 0, if any.
  const Child* FinishedWorker() const;
  // Takes the hosts' changes (SupervisorOptions::worker_hosts): stops the
  // workers left without a slot.
  void FollowWorkerHosts(TimePoint now);
  // The first listed host with fewer running workers than slots, if any.
  std::optional<HostSlots> FreeWorkerHost() const;
  // A replacement still running `teardown_grace` after every other worker
  // ended, one of them with status 0, did not join before the job ended (a
  // joined one passes the others' final barrier with them): it gets
  // SIGTERM, and its end is a departure.
  void StopUnjoinedReplacements(TimePoint now);
  // A worker that left the job may have left processes in its group: they
  // get SIGTERM now and SIGKILL kill_delay later (KillDepartedGroups).
  void StopDepartedGroup(Child& child, TimePoint now);
  // SIGTERM to the child's process group now, SIGKILL kill_delay later
  // (KillDepartedGroups): a worker leaving the job while it goes on.
  void TerminateGroup(Child& child, TimePoint now);
  void KillDepartedGroups(TimePoint now);
  // When the job's cause is a worker whose loss left fewer than the minimum
  // but was reaped after another process's end had failed the job (ends
  // reaped in one sweep come in start order: a server's PeerLost before
  // the worker whose loss it reports), the shortfall it brought; else "".
  std::string ShortfallOfCause(const ProcessExit& cause) const;
  // "; had left the job: ..." for the final line, when workers left.
  std::string DeparturesClause() const;
  void UpdateGroups();
  void AdvanceTearDown(TimePoint now);
  // True once every non-service process has exited with status 0 and a
  // service has outlived them by teardown_grace (starts that clock).
  bool ServicesOutlivedTheJob(TimePoint now);
  // Signals every group still present (a child that stops with two SIGINTs
  // gets the first; SendDueSigints the second). Returns how many.
  int SignalGroups(int signal);
  void SendDueSigints(TimePoint now);
  int LiveGroups() const;
  bool AllExited() const;
  bool Finished() const;
  void Drain(Child& child, bool to_stderr, int max_reads);
  // Keeps `line` (of its standard error) as the child's last words.
  static void RememberLastWords(Child& child, std::string_view line);
  void Log(const std::string& text);
  int PollTimeoutMs(TimePoint now) const;
  void KillAndReapEverything();
  void EndAdoptedOrphans();
  void RestoreProcessState();

  SupervisorOptions options_;
  OutputSink stdout_sink_;
  OutputSink stderr_sink_;
  std::vector<std::unique_ptr<Child>> children_;

  sigset_t handled_signals_;
  sigset_t saved_mask_;  // the thread's mask before; children start with it
  base::UniqueFd signal_fd_;
  bool restore_sigchld_ = false;
  struct sigaction saved_sigchld_ {};
  bool restore_subreaper_ = false;
  int saved_subreaper_ = 0;

  bool ran_ = false;
  Phase phase_ = Phase::kRunning;
  TimePoint deadline_{};
  bool sweep_due_ = true;  // reap and check groups on the next loop turn
  TimePoint last_sweep_{};
  std::vector<ProcessExit> exits_;
  std::optional<ProcessExit> first_failure_;
  int interrupt_signal_ = 0;
  // Elastic jobs: the workers that left, in order (ProcessExit::Describe()),
  // and why the job failed when a loss went below the minimum.
  std::vector<std::string> departures_;
  std::string shortfall_;
  // The workers' places without a process now: departures less the
  // replacements started.
  int absent_workers_ = 0;
  // Replacements due to start (ScheduleReplacement), and how many started.
  struct PendingReplacement {
    ProcessSpec spec;
    TimePoint due;
    bool waiting_for_host = false;  // due, but no listed host has a free slot
  };
  // The hosts in force (SupervisorOptions::worker_hosts).
  std::optional<std::vector<HostSlots>> hosts_;
  std::vector<PendingReplacement> pending_replacements_;
  int replacements_started_ = 0;
  // When the replacements still running are stopped (StopUnjoinedReplacements).
  std::optional<TimePoint> unjoined_deadline_;
  // Every process but the services has exited with status 0: when the
  // services must have ended (see ProcessSpec::service), and whether they
  // were torn down for not ending.
  std::optional<TimePoint> services_deadline_;
  bool services_stuck_ = false;
};

}  // namespace tandem::launch
