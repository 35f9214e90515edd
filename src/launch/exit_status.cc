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

std::optional<ExitStatus> ExitStatus::FromDescription(std::string_view text) {
  // The number after the last of the two phrases, if digits follow it.
  std::optional<ExitStatus> found;
  size_t found_at = 0;
  for (const bool killed : {false, true}) {
    const std::string_view phrase = killed ? "killed by signal " : "exited with status ";
    const size_t at = text.rfind(phrase);
    if (at == std::string_view::npos || (found && at < found_at)) continue;
    size_t digits = at + phrase.size();
    int value = 0;
    size_t end = digits;
    while (end < text.size() && end - digits < 4 && text[end] >= '0' && text[end] <= '9') {
      value = value * 10 + (text[end] - '0');
      ++end;
    }
    if (end == digits) continue;
    found = killed ? Killed(value) : Exited(value);
    found_at = at;
  }
  if (found && found->signaled && text.find(", core dumped", found_at) != std::string_view::npos) {
    found->core_dumped = true;
  }
  return found;
}

std::string SignalName(int signal) {
  const char* abbrev = ::sigabbrev_np(signal);
  if (abbrev == nullptr) return fmt::format("signal {}", signal);
  return fmt::format("SIG{}", abbrev);
}

}  // namespace tandem::launch
