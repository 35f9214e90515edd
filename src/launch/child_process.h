// Starting one process of a job: its own process group, death with the
// launcher, output through pipes, an explicit environment, no shell.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/unique_fd.h"

namespace tandem::launch {

/// What to run. Thread-safety: a value type.
struct ProcessSpec {
  /// Names the process in output prefixes and reports: "worker 3".
  std::string label;
  /// The program and its arguments, passed to execve untouched (no shell).
  /// argv[0] without a '/' is looked up in the PATH of `env`.
  std::vector<std::string> argv;
  /// The complete environment of the process (nothing else is inherited).
  std::map<std::string, std::string> env;
  /// Without a value the child's stdin is /dev/null. With one, stdin is a
  /// pipe: these bytes (at most kMaxStdinData) are written to it at start,
  /// and the write end stays open in the launcher while the child lives, so
  /// the child sees end-of-file only when the launcher closes it or dies
  /// (`tandem remote-exec` uses that to notice a lost launcher).
  std::optional<std::string> stdin_data;
  /// A service of the job (its scheduler, a server): it ends on its own once
  /// the other processes, the workers, are done. When every other process
  /// has exited with status 0 and a service is still running after the
  /// supervisor's teardown_grace, the job is torn down as stuck
  /// (ProcessSupervisor::Run, docs/launch.md "Tear-down").
  bool service = false;
  /// Whether the supervisor prefixes each output line with "[label] ";
  /// false for a process whose lines carry their own labels (mpirun, whose
  /// ranks prefix theirs).
  bool prefix_output = true;
  /// A rank launcher (mpirun, srun) whose ranks run `tandem rank-exec`:
  /// the first report of a failure by a rank-exec in its output
  /// (RankFailureReport) names the job's first failed rank, and when the launcher then fails, the
  /// supervisor reports that rank and its exit code as the job's failure
  /// (ProcessSupervisor, "Exit code"), not the launcher's own.
  bool relays_rank_exec = false;
  /// How the supervisor asks the process to stop (a forwarded SIGINT,
  /// SIGTERM or SIGHUP, or the SIGTERM after the grace period): false, with
  /// that signal; true, with SIGINT twice, kSecondSigintDelay apart. srun
  /// wants the latter: one SIGINT only makes it print its tasks' states,
  /// two within a second make it send SIGINT to every task and wait for
  /// them, whereas SIGTERM makes it cancel the step at once with SIGKILL,
  /// which leaves the tasks (tandem rank-exec) no time to end their own
  /// processes. SIGKILL is sent as it is.
  bool stop_with_two_sigints = false;
  /// Where the process runs when that is not this host ("h2" for the ssh
  /// launcher); named in the reports of its end. Empty: this host.
  std::string host;
};

/// ProcessSpec::stop_with_two_sigints: the pause between the two SIGINTs
/// (srun cancels its step on two within a second; two signals sent at once
/// may arrive as one).
inline constexpr std::chrono::milliseconds kSecondSigintDelay{300};

/// The most bytes ProcessSpec::stdin_data may hold (one pipe buffer, so the
/// write never waits for the child).
inline constexpr size_t kMaxStdinData = 60 * 1024;

/// A started process. Its pid is also its process group id.
/// Thread-safety: a value type; the owner's thread.
struct StartedProcess {
  pid_t pid = -1;
  base::UniqueFd stdout_pipe;  ///< read end of the child's stdout, non-blocking
  base::UniqueFd stderr_pipe;  ///< read end of the child's stderr, non-blocking
  base::UniqueFd stdin_pipe;   ///< write end of the child's stdin (with stdin_data)
};

/// The file `program` names: itself when it contains a '/', else the first
/// executable regular file of that name in the PATH of `env` (an empty
/// entry meaning the current directory; no PATH at all meaning
/// "/usr/local/bin:/usr/bin:/bin"). Throws InvalidArgument naming the
/// program and the PATH searched when there is none. Any thread.
std::string FindExecutable(const std::string& program,
                           const std::map<std::string, std::string>& env);

/// Starts `spec` with fork and execve and returns once the program runs.
///
/// The child:
///  - leads a new process group (setpgid(0, 0)), so a terminal's Ctrl-C
///    reaches only the launcher, and the launcher can signal the child and
///    every process it starts in one kill(-pgid, ...);
///  - gets SIGKILL when the thread that called this function dies
///    (PR_SET_PDEATHSIG), and exits at once if the launcher already died
///    before that was set;
///  - reads /dev/null as stdin and writes stdout and stderr to two pipes;
///  - starts with `signal_mask` as its signal mask (the launcher's mask
///    before it blocked the signals it handles) and inherits the calling
///    process's signal dispositions.
///
/// The calling thread must outlive the child (PR_SET_PDEATHSIG follows the
/// thread that forked). Safe to call in a multi-threaded process: the child
/// calls only async-signal-safe functions before execve. Throws
/// InvalidArgument (empty argv, program not found), IoError naming the label
/// and the failing call (pipe, fork, setpgid, execve...); a child that could
/// not exec has been reaped when it throws.
StartedProcess StartChildProcess(const ProcessSpec& spec, const sigset_t& signal_mask);

/// What a short command run by RunToEnd did. Thread-safety: a value type.
struct FinishedRun {
  std::string out;         ///< its stdout, the first `max_output` bytes
  std::string err;         ///< its stderr, likewise
  bool timed_out = false;  ///< still running at the time-out: its group was killed
  int status = 0;          ///< its waitpid status, when not timed out
};

/// Runs every spec at once (no signal blocked), reads their output until
/// it ends, and waits for their exits, all within `timeout`; the process
/// group of one still running then gets SIGKILL and is reaped. Returns one
/// FinishedRun per spec, in order. For short commands whose output is an
/// answer (a host check, a host list). Throws what StartChildProcess
/// throws, after reaping the ones already started. Any thread (it waits
/// for its own children only).
std::vector<FinishedRun> RunToEnd(const std::vector<ProcessSpec>& specs,
                                  std::chrono::milliseconds timeout, size_t max_output);

}  // namespace tandem::launch
