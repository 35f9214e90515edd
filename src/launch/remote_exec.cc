#include "launch/remote_exec.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"
#include "launch/child_process.h"
#include "launch/exit_status.h"
#include "launch/rank_timeline.h"
#include "launch/worker_variables.h"
#include "tandem/error.h"

namespace tandem::launch {
namespace {

// How often remote-exec looks for its command's end without a SIGCHLD.
constexpr int kChildPollMs = 200;

constexpr std::string_view kMagic = "TANDEM-ENV/1\n";

bool ValidName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

using Clock = std::chrono::steady_clock;

// Reads exactly one byte within the deadline.
char ReadByte(int fd, Clock::time_point deadline) {
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      throw Timeout("remote-exec: the launcher did not send the environment on stdin in time");
    }
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw IoError(fmt::format("remote-exec: poll on stdin: {}", std::strerror(errno)));
    if (r == 0) continue;
    char c;
    ssize_t n = ::read(fd, &c, 1);
    if (n == 1) return c;
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n == 0) {
      throw ProtocolError("remote-exec: stdin ended before the environment header was complete");
    }
    throw IoError(fmt::format("remote-exec: read from stdin: {}", std::strerror(errno)));
  }
}

}  // namespace

std::vector<std::map<std::string, std::string>> RemoteContracts(
    const std::vector<ProcessSpec>& local, const std::vector<size_t>& place,
    const std::vector<HostSlots>& hosts, int num_workers, uint16_t master_port,
    const std::string& scheduler_host,
    const std::vector<std::pair<std::string, std::string>>& job_env,
    const std::map<std::string, std::string>& base) {
  const size_t first_worker = local.size() - static_cast<size_t>(num_workers);
  const std::vector<WorkerPlacement> workers = PlaceWorkers(place, first_worker);
  const std::string& master_host = hosts[place[first_worker]].host;
  std::vector<std::map<std::string, std::string>> contracts;
  for (size_t i = 0; i < local.size(); ++i) {
    std::map<std::string, std::string> contract = base;
    for (const auto& [name, value] : local[i].env) contract[name] = value;
    if (i >= first_worker) {
      for (auto& [name, value] :
           WorkerVariables(workers[i - first_worker], master_host, master_port)) {
        contract[name] = value;
      }
    }
    contract["DMLC_PS_ROOT_URI"] = scheduler_host;
    contract.erase("DMLC_NODE_HOST");  // chosen on the host: the route to the scheduler
    for (const auto& [name, value] : job_env) contract[name] = value;  // --env wins
    contracts.push_back(std::move(contract));
  }
  return contracts;
}

std::string EncodeRemoteEnvironment(const std::map<std::string, std::string>& vars) {
  std::string out(kMagic);
  for (const auto& [name, value] : vars) {
    if (!ValidName(name)) {
      throw InvalidArgument(
          fmt::format("cannot forward the variable '{}': not a valid name", name));
    }
    std::string entry = name + "=" + value;
    out += fmt::format("{}:{},", entry.size(), entry);
  }
  out += "0:,";
  return out;
}

std::map<std::string, std::string> ReadRemoteEnvironment(int fd,
                                                         std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  for (char expected : kMagic) {
    char c = ReadByte(fd, deadline);
    if (c != expected) {
      throw ProtocolError(
          "remote-exec: stdin does not start with TANDEM-ENV/1 (remote-exec is meant to be "
          "started by `tandem launch --launcher ssh`)");
    }
  }
  std::map<std::string, std::string> vars;
  size_t total = 0;
  while (true) {
    size_t length = 0;
    int digits = 0;
    for (char c = ReadByte(fd, deadline); c != ':'; c = ReadByte(fd, deadline)) {
      if (c < '0' || c > '9' || ++digits > 6) {
        throw ProtocolError("remote-exec: a bad length in the environment header");
      }
      length = length * 10 + static_cast<size_t>(c - '0');
    }
    if (digits == 0) throw ProtocolError("remote-exec: an empty length in the environment header");
    total += length;
    if (total > kMaxStdinData) {
      throw ProtocolError(
          fmt::format("remote-exec: the environment header exceeds {} bytes", kMaxStdinData));
    }
    std::string entry;
    entry.reserve(length);
    for (size_t i = 0; i < length; ++i) entry.push_back(ReadByte(fd, deadline));
    if (ReadByte(fd, deadline) != ',') {
      throw ProtocolError("remote-exec: a netstring without its ',' in the environment header");
    }
    if (length == 0) return vars;
    size_t eq = entry.find('=');
    if (eq == std::string::npos || !ValidName(std::string_view(entry).substr(0, eq))) {
      throw ProtocolError("remote-exec: an entry of the environment header is not NAME=VALUE");
    }
    vars[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
}

int RunRemoteExec(const RemoteExecOptions& options) {
  if (options.command.empty()) throw InvalidArgument("remote-exec: no command given");
  const std::string path = FindExecutable(options.command[0], options.environment);
  std::vector<char*> argv;
  for (const auto& a : options.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> entries;
  for (const auto& [k, v] : options.environment) entries.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : entries) envp.push_back(e.data());
  envp.push_back(nullptr);

  sigset_t handled, saved;
  sigemptyset(&handled);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaddset(&handled, sig);
  if (::sigprocmask(SIG_BLOCK, &handled, &saved) != 0) {
    throw IoError(fmt::format("remote-exec: sigprocmask: {}", std::strerror(errno)));
  }
  base::UniqueFd sfd(::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!sfd) throw IoError(fmt::format("remote-exec: signalfd: {}", std::strerror(errno)));
  base::UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const char* cwd = options.working_directory.empty() ? nullptr : options.working_directory.c_str();
  const pid_t parent = ::getpid();

  pid_t pid = ::fork();
  if (pid < 0) throw IoError(fmt::format("remote-exec: fork: {}", std::strerror(errno)));
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(dev_null.get(), STDIN_FILENO);
    // The command must not hold the watched descriptor open: its end is
    // how remote-exec learns that the launcher went away.
    if (options.watch_fd > STDERR_FILENO) ::close(options.watch_fd);
    ::sigprocmask(SIG_SETMASK, &saved, nullptr);
    if (cwd != nullptr && ::chdir(cwd) != 0) {
      ::dprintf(2, "remote-exec: cannot enter %s: %s\n", cwd, std::strerror(errno));
      ::_exit(127);
    }
    ::execve(path.c_str(), argv.data(), envp.data());
    ::dprintf(2, "remote-exec: cannot run %s: %s\n", path.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also in the child: whichever runs first

  bool watching = true;
  bool stopping = false;
  Clock::time_point kill_at{};
  while (true) {
    pollfd fds[2] = {{sfd.get(), POLLIN, 0}, {options.watch_fd, POLLIN, 0}};
    // SIGCHLD reaches the signalfd only if every thread blocks it; in a
    // process with a thread that does not (a library's, a test binary's
    // earlier test), the signal is lost to that thread, so the child's end
    // is also looked for every kChildPollMs.
    int timeout_ms = kChildPollMs;
    if (stopping) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(kill_at - Clock::now());
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left.count(), 0, kChildPollMs));
    }
    int r = ::poll(fds, watching ? 2 : 1, timeout_ms);
    if (r < 0 && errno != EINTR) {
      ::kill(-pid, SIGKILL);
      throw IoError(fmt::format("remote-exec: poll: {}", std::strerror(errno)));
    }
    if (stopping && Clock::now() >= kill_at) ::kill(-pid, SIGKILL);
    if (watching && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      char buf[256];
      ssize_t n = ::read(options.watch_fd, buf, sizeof(buf));
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
        watching = false;
        if (!stopping) {
          ::dprintf(2,
                    "remote-exec: the launcher's connection closed; stopping %s (pid %d): "
                    "SIGTERM, SIGKILL after %lld ms\n",
                    options.command[0].c_str(), pid, static_cast<long long>(options.grace.count()));
          ::kill(-pid, SIGTERM);
          stopping = true;
          kill_at = Clock::now() + options.grace;
        }
      }
    }
    if ((fds[0].revents & POLLIN) != 0) {
      signalfd_siginfo info{};
      while (::read(sfd.get(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
        int sig = static_cast<int>(info.ssi_signo);
        if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) ::kill(-pid, sig);
      }
    }
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG) == 0 &&
        info.si_pid == pid) {
      ::kill(-pid, SIGKILL);  // whatever the command left in its group
      KeepRankTimeline(options.environment, options.working_directory, pid, options.label);
      ExitStatus status = ExitStatus::FromSiginfo(info);
      return status.signaled ? 128 + status.signal : status.code;
    }
  }
}

}  // namespace tandem::launch
