#include "launch/host_discovery.h"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "launch/child_process.h"
#include "tandem/error.h"

namespace tandem::launch {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxOutputBytes = 1 << 20;  // a host list, not a log

// Reads what is there on `fd` into `out` (at most kMaxOutputBytes); resets
// `fd` at its end.
void ReadSome(base::UniqueFd& fd, std::string& out) {
  char buf[4096];
  const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
  if (n > 0) {
    if (out.size() < kMaxOutputBytes) out.append(buf, static_cast<size_t>(n));
  } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    fd.Reset();
  }
}

std::string LastLine(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  const size_t nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

}  // namespace

std::vector<HostSlots> DiscoverHosts(const std::string& script,
                                     const std::map<std::string, std::string>& env,
                                     std::chrono::milliseconds timeout) {
  const std::string name = "the host discovery script " + script;
  ProcessSpec spec;
  spec.label = "host discovery";
  spec.argv = {script};
  spec.env = env;
  sigset_t none;
  sigemptyset(&none);
  StartedProcess p = StartChildProcess(spec, none);
  std::string out;
  std::string err;
  const Clock::time_point deadline = Clock::now() + timeout;
  bool timed_out = false;
  while (p.stdout_pipe || p.stderr_pipe) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    std::vector<pollfd> fds;
    if (p.stdout_pipe) fds.push_back({p.stdout_pipe.get(), POLLIN, 0});
    if (p.stderr_pipe) fds.push_back({p.stderr_pipe.get(), POLLIN, 0});
    ::poll(fds.data(), fds.size(), static_cast<int>(left));
    for (const pollfd& f : fds) {
      if (f.revents == 0) continue;
      if (p.stdout_pipe && f.fd == p.stdout_pipe.get()) {
        ReadSome(p.stdout_pipe, out);
      } else if (p.stderr_pipe && f.fd == p.stderr_pipe.get()) {
        ReadSome(p.stderr_pipe, err);
      }
    }
  }
  int status = 0;
  pid_t reaped = timed_out ? 0 : ::waitpid(p.pid, &status, WNOHANG);
  // Its output ended; its exit follows at once unless it hangs.
  while (reaped == 0 && !timed_out) {
    if (Clock::now() >= deadline) {
      timed_out = true;
      break;
    }
    ::usleep(2000);
    reaped = ::waitpid(p.pid, &status, WNOHANG);
  }
  if (timed_out) {
    ::kill(-p.pid, SIGKILL);  // its own process group, with whatever it started
    ::waitpid(p.pid, &status, 0);
    throw InvalidArgument(
        fmt::format("{} gave no answer within {} ms (killed)", name, timeout.count()));
  }
  if (reaped < 0) throw IoError(fmt::format("waiting for {} failed", name));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string how = WIFEXITED(status)
                                ? fmt::format("exited {}", WEXITSTATUS(status))
                                : fmt::format("was killed by signal {}", WTERMSIG(status));
    const std::string said = LastLine(err);
    throw InvalidArgument(fmt::format("{} {}{}", name, how, said.empty() ? "" : ": " + said));
  }
  return ParseHostfile(out, name + "'s output");  // refuses an output without a host
}

HostDiscovery::HostDiscovery(std::string script, std::map<std::string, std::string> env,
                             std::chrono::milliseconds interval, std::chrono::milliseconds timeout,
                             std::vector<HostSlots> initial)
    : script_(std::move(script)),
      env_(std::move(env)),
      interval_(interval),
      timeout_(timeout),
      latest_(std::move(initial)) {
  thread_ = std::thread([this] { Poll(); });
}

HostDiscovery::~HostDiscovery() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

namespace {

bool SameHosts(const std::vector<HostSlots>& a, const std::vector<HostSlots>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].login != b[i].login || a[i].host != b[i].host || a[i].slots != b[i].slots) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::optional<std::vector<HostSlots>> HostDiscovery::Changed() {
  std::lock_guard lock(mu_);
  if (returned_ && SameHosts(*returned_, latest_)) return std::nullopt;
  returned_ = latest_;
  return latest_;
}

std::vector<HostSlots> HostDiscovery::Latest() {
  std::lock_guard lock(mu_);
  return latest_;
}

std::optional<std::string> HostDiscovery::TakeError() {
  std::lock_guard lock(mu_);
  if (error_.empty() || error_ == error_taken_) return std::nullopt;
  error_taken_ = error_;
  return error_;
}

void HostDiscovery::Poll() {
  std::unique_lock lock(mu_);
  while (!stop_cv_.wait_for(lock, interval_, [this] { return stop_; })) {
    lock.unlock();
    std::vector<HostSlots> hosts;
    std::string error;
    try {
      hosts = DiscoverHosts(script_, env_, timeout_);
    } catch (const Error& e) {
      error = e.what();
    }
    lock.lock();
    if (error.empty()) {
      latest_ = std::move(hosts);
      error_.clear();
      error_taken_.clear();
    } else {
      error_ = error;
    }
  }
}

std::string DescribeHosts(const std::vector<HostSlots>& hosts) {
  std::string out;
  for (const auto& h : hosts) {
    out += fmt::format("{}{}:{}", out.empty() ? "" : ", ", h.login, h.slots);
  }
  return out;
}

}  // namespace tandem::launch
