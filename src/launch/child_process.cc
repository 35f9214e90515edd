#include "launch/child_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tandem/error.h"

namespace tandem::launch {
namespace {

constexpr const char* kDefaultPath = "/usr/local/bin:/usr/bin:/bin";

// What the child reports through its error pipe when it cannot exec: the
// step that failed and its errno. Nothing arrives when execve succeeds,
// because the pipe is close-on-exec.
struct ChildFailure {
  int step;
  int error;
};

enum ChildStep : int {
  kStepSetpgid = 1,
  kStepPdeathsig,
  kStepParentGone,
  kStepStdin,
  kStepStdout,
  kStepStderr,
  kStepSigmask,
  kStepExec,
};

const char* StepName(int step) {
  switch (step) {
    case kStepSetpgid:
      return "setpgid";
    case kStepPdeathsig:
      return "prctl(PR_SET_PDEATHSIG)";
    case kStepParentGone:
      return "checking that the launcher still runs";
    case kStepStdin:
      return "dup2 of stdin";
    case kStepStdout:
      return "dup2 of stdout";
    case kStepStderr:
      return "dup2 of stderr";
    case kStepSigmask:
      return "resetting the signal mask and dispositions";
    case kStepExec:
      return "execve";
  }
  return "an unknown step";
}

bool IsExecutableFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

[[noreturn]] void ThrowErrno(const std::string& label, const char* call) {
  throw IoError(fmt::format("cannot start {}: {} failed: {}", label, call, std::strerror(errno)));
}

// Moves `fd` to a number above 2 when it is one of 0, 1, 2 (the launcher
// was started with a standard descriptor closed), so that the child's dup2
// calls onto 0, 1 and 2 cannot overwrite a descriptor they still need.
void MoveAboveStdio(const std::string& label, base::UniqueFd* fd) {
  if (fd->get() > STDERR_FILENO) return;
  int moved = ::fcntl(fd->get(), F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  if (moved < 0) ThrowErrno(label, "fcntl(F_DUPFD_CLOEXEC)");
  fd->Reset(moved);
}

// Two pipe ends; the read end becomes non-blocking for the launcher's poll
// loop, the write end stays blocking for the child.
void MakePipe(const std::string& label, base::UniqueFd* read_end, base::UniqueFd* write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) ThrowErrno(label, "pipe2");
  read_end->Reset(fds[0]);
  write_end->Reset(fds[1]);
  MoveAboveStdio(label, write_end);
  int flags = ::fcntl(fds[0], F_GETFL);
  if (flags < 0 || ::fcntl(fds[0], F_SETFL, flags | O_NONBLOCK) != 0) ThrowErrno(label, "fcntl");
}

// Runs in the forked child: only async-signal-safe calls until execve.
[[noreturn]] void RunChild(const char* path, char* const* argv, char* const* envp, pid_t parent,
                           int stdin_fd, int stdout_fd, int stderr_fd, int report_fd,
                           const sigset_t& signal_mask) {
  auto fail = [report_fd](int step) {
    ChildFailure failure{step, errno};
    ssize_t ignored = ::write(report_fd, &failure, sizeof(failure));
    (void)ignored;
    ::_exit(127);
  };
  if (::setpgid(0, 0) != 0) fail(kStepSetpgid);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(kStepPdeathsig);
  // The launcher may have died between fork and prctl; then nobody would
  // send us the death signal.
  if (::getppid() != parent) {
    errno = ESRCH;
    fail(kStepParentGone);
  }
  if (::dup2(stdin_fd, STDIN_FILENO) < 0) fail(kStepStdin);
  if (::dup2(stdout_fd, STDOUT_FILENO) < 0) fail(kStepStdout);
  if (::dup2(stderr_fd, STDERR_FILENO) < 0) fail(kStepStderr);
  // The launcher stops a job by forwarding SIGINT/SIGTERM. A launcher that
  // was itself started with them ignored (a background job of a script,
  // nohup) would pass that disposition on through exec, and the job would
  // only die at the SIGKILL after the grace period.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  if (::sigaction(SIGINT, &dfl, nullptr) != 0 || ::sigaction(SIGTERM, &dfl, nullptr) != 0) {
    fail(kStepSigmask);
  }
  if (::sigprocmask(SIG_SETMASK, &signal_mask, nullptr) != 0) fail(kStepSigmask);
  ::execve(path, argv, envp);
  fail(kStepExec);
  ::_exit(127);  // not reached: fail() exits
}

}  // namespace

std::string FindExecutable(const std::string& program,
                           const std::map<std::string, std::string>& env) {
  if (program.empty()) throw InvalidArgument("the command to run is an empty string");
  if (program.find('/') != std::string::npos) return program;
  auto it = env.find("PATH");
  const std::string path = it != env.end() ? it->second : kDefaultPath;
  size_t begin = 0;
  while (true) {
    size_t end = path.find(':', begin);
    std::string dir =
        path.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    std::string candidate = dir.empty() ? program : dir + "/" + program;
    if (IsExecutableFile(candidate)) return candidate;
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  throw InvalidArgument(fmt::format(
      "command '{}' not found: no executable file of that name in PATH={}", program, path));
}

StartedProcess StartChildProcess(const ProcessSpec& spec, const sigset_t& signal_mask) {
  if (spec.argv.empty()) {
    throw InvalidArgument(fmt::format("cannot start {}: the command is empty", spec.label));
  }
  const std::string path = FindExecutable(spec.argv[0], spec.env);

  // Everything the child needs is built here: after fork it may not allocate.
  std::vector<char*> argv;
  argv.reserve(spec.argv.size() + 1);
  for (const auto& arg : spec.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_entries;
  env_entries.reserve(spec.env.size());
  for (const auto& [key, value] : spec.env) env_entries.push_back(key + "=" + value);
  std::vector<char*> envp;
  envp.reserve(env_entries.size() + 1);
  for (auto& entry : env_entries) envp.push_back(entry.data());
  envp.push_back(nullptr);

  StartedProcess started;
  base::UniqueFd stdout_write, stderr_write, report_read, report_write;
  MakePipe(spec.label, &started.stdout_pipe, &stdout_write);
  MakePipe(spec.label, &started.stderr_pipe, &stderr_write);
  {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) ThrowErrno(spec.label, "pipe2");
    report_read.Reset(fds[0]);
    report_write.Reset(fds[1]);
    MoveAboveStdio(spec.label, &report_write);
  }
  base::UniqueFd stdin_read;
  if (spec.stdin_data) {
    if (spec.stdin_data->size() > kMaxStdinData) {
      throw InvalidArgument(fmt::format("cannot start {}: {} bytes of stdin data, at most {}",
                                        spec.label, spec.stdin_data->size(), kMaxStdinData));
    }
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) ThrowErrno(spec.label, "pipe2");
    stdin_read.Reset(fds[0]);
    started.stdin_pipe.Reset(fds[1]);
  } else {
    stdin_read.Reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!stdin_read) ThrowErrno(spec.label, "open(/dev/null)");
  }
  MoveAboveStdio(spec.label, &stdin_read);

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) ThrowErrno(spec.label, "fork");
  if (pid == 0) {
    RunChild(path.c_str(), argv.data(), envp.data(), parent, stdin_read.get(), stdout_write.get(),
             stderr_write.get(), report_write.get(), signal_mask);
  }
  report_write.Reset();
  stdout_write.Reset();
  stderr_write.Reset();
  stdin_read.Reset();

  // Blocks until the child has exec'd (the close-on-exec pipe closes, read
  // returns 0) or reported why it could not.
  ChildFailure failure{};
  ssize_t n;
  do {
    n = ::read(report_read.get(), &failure, sizeof(failure));
  } while (n < 0 && errno == EINTR);
  if (n == 0) {
    started.pid = pid;
    if (spec.stdin_data && !spec.stdin_data->empty()) {
      // Fits in the pipe's buffer (kMaxStdinData), so this never waits for
      // the child. A child that already exited closes its end: EPIPE
      // (SIGPIPE is blocked or handled by the launcher), reported later as
      // the child's exit.
      const std::string& data = *spec.stdin_data;
      size_t done = 0;
      while (done < data.size()) {
        ssize_t w = ::write(started.stdin_pipe.get(), data.data() + done, data.size() - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += static_cast<size_t>(w);
      }
    }
    return started;
  }

  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(sizeof(failure))) {
    throw IoError(
        fmt::format("cannot start {} ({}): the child failed before execve without "
                    "saying why",
                    spec.label, path));
  }
  throw IoError(fmt::format("cannot start {} ({}): {}: {}", spec.label, path,
                            StepName(failure.step), std::strerror(failure.error)));
}

std::vector<FinishedRun> RunToEnd(const std::vector<ProcessSpec>& specs,
                                  std::chrono::milliseconds timeout, size_t max_output) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  sigset_t none;
  sigemptyset(&none);
  std::vector<StartedProcess> started;
  std::vector<FinishedRun> runs(specs.size());
  try {
    for (const ProcessSpec& spec : specs) started.push_back(StartChildProcess(spec, none));
  } catch (...) {
    for (const StartedProcess& p : started) {
      ::kill(-p.pid, SIGKILL);
      ::waitpid(p.pid, nullptr, 0);
    }
    throw;
  }
  while (true) {
    std::vector<pollfd> fds;
    std::vector<std::pair<base::UniqueFd*, std::string*>> owner;
    for (size_t i = 0; i < started.size(); ++i) {
      for (auto [fd, text] : {std::pair{&started[i].stdout_pipe, &runs[i].out},
                              std::pair{&started[i].stderr_pipe, &runs[i].err}}) {
        if (!*fd) continue;
        fds.push_back({fd->get(), POLLIN, 0});
        owner.emplace_back(fd, text);
      }
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (fds.empty() || left.count() <= 0) break;
    ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      auto [fd, text] = owner[k];
      char buf[4096];
      const ssize_t n = ::read(fd->get(), buf, sizeof(buf));
      if (n > 0) {
        if (text->size() < max_output) text->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        fd->Reset();
      }
    }
  }
  for (size_t i = 0; i < started.size(); ++i) {
    pid_t reaped = ::waitpid(started[i].pid, &runs[i].status, WNOHANG);
    // Its output ended; its exit follows at once unless it hangs.
    while (reaped == 0 && Clock::now() < deadline) {
      ::usleep(2000);
      reaped = ::waitpid(started[i].pid, &runs[i].status, WNOHANG);
    }
    if (reaped < 0) {
      throw IoError(fmt::format("waiting for {} failed: {}", specs[i].label, std::strerror(errno)));
    }
    if (reaped == 0) {
      runs[i].timed_out = true;
      ::kill(-started[i].pid, SIGKILL);  // its group, with whatever it started
      ::waitpid(started[i].pid, &runs[i].status, 0);
    }
  }
  return runs;
}

}  // namespace tandem::launch
