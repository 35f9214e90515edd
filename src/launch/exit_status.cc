#include "launch/exit_status.h"

#include <fmt/format.h>

#include <cstring>

#include "tandem/error.h"

namespace tandem::launch {

ExitStatus ExitStatus::FromSiginfo(const siginfo_t& info) {
  switch (info.si_code) {
    case CLD_EXITED:
      return Exited(info.si_status);
    case CLD_KILLED:
      return Killed(info.si_status);
    case CLD_DUMPED: {
      ExitStatus s = Killed(info.si_status);
      s.core_dumped = true;
      return s;
    }
    default:
      throw InvalidArgument(fmt::format(
          "waitid reported pid {} with si_code {}, which is not an exit or a death by signal",
          info.si_pid, info.si_code));
  }
}

ExitStatus ExitStatus::Exited(int code) {
  ExitStatus s;
  s.code = code;
  return s;
}

ExitStatus ExitStatus::Killed(int signal) {
  ExitStatus s;
  s.signaled = true;
  s.signal = signal;
  return s;
}

std::string ExitStatus::Describe() const {
  if (!signaled) return fmt::format("exited with status {}", code);
  return fmt::format("killed by signal {} ({}){}", signal, SignalName(signal),
                     core_dumped ? ", core dumped" : "");
}

std::string SignalName(int signal) {
  const char* abbrev = ::sigabbrev_np(signal);
  if (abbrev == nullptr) return fmt::format("signal {}", signal);
  return fmt::format("SIG{}", abbrev);
}

}  // namespace tandem::launch
