// How a child process ended, as waitid() reports it, and what that means
// for the job's exit code.
#pragma once

#include <signal.h>

#include <optional>
#include <string>
#include <string_view>

namespace tandem::launch {

/// The end of one process: an exit status or a terminating signal.
/// Thread-safety: a value type.
struct ExitStatus {
  bool signaled = false;  ///< true: killed by `signal`; false: exited with `code`
  int code = 0;           ///< the exit status (0..255) when !signaled
  int signal = 0;         ///< the signal number when signaled
  bool core_dumped = false;

  /// Builds the status from a waitid() result whose si_code is CLD_EXITED,
  /// CLD_KILLED or CLD_DUMPED. Throws InvalidArgument for any other si_code
  /// (stopped or continued children are never asked for).
  static ExitStatus FromSiginfo(const siginfo_t& info);
  /// An exit with status `code`.
  static ExitStatus Exited(int code);
  /// Death by `signal`.
  static ExitStatus Killed(int signal);

  /// True for an exit with status 0.
  bool success() const { return !signaled && code == 0; }

  /// The code a shell would show for this end: the status, or 128 + signal.
  int ShellCode() const { return signaled ? 128 + signal : code; }

  /// "exited with status 3" or "killed by signal 9 (SIGKILL)", with
  /// ", core dumped" when a core was written.
  std::string Describe() const;

  /// The status a text holding Describe()'s words says ("... exited with
  /// status 3", "... killed by signal 9 (SIGKILL)"), e.g. a line another
  /// process wrote; nothing when it holds neither. The last such phrase of
  /// the text counts. Pure.
  static std::optional<ExitStatus> FromDescription(std::string_view text);
};

/// "SIGKILL" for 9, and "signal 70" for numbers the C library has no name for.
std::string SignalName(int signal);

}  // namespace tandem::launch
