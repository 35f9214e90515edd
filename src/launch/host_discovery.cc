#include "launch/host_discovery.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include "launch/child_process.h"
#include "tandem/error.h"

namespace tandem::launch {
namespace {

constexpr size_t kMaxOutputBytes = 1 << 20;  // a host list, not a log

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
  const FinishedRun run = RunToEnd({spec}, timeout, kMaxOutputBytes).front();
  if (run.timed_out) {
    throw InvalidArgument(
        fmt::format("{} gave no answer within {} ms (killed)", name, timeout.count()));
  }
  const int status = run.status;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string how = WIFEXITED(status)
                                ? fmt::format("exited {}", WEXITSTATUS(status))
                                : fmt::format("was killed by signal {}", WTERMSIG(status));
    const std::string said = LastLine(run.err);
    throw InvalidArgument(fmt::format("{} {}{}", name, how, said.empty() ? "" : ": " + said));
  }
  return ParseHostfile(run.out, name + "'s output");  // refuses an output without a host
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

std::optional<std::vector<HostSlots>> HostDiscovery::Changed() {
  std::lock_guard lock(mu_);
  if (returned_ == latest_) return std::nullopt;
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
