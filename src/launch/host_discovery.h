// `tandem launch --host-discovery-script SCRIPT` (horovodrun's option of the
// same name): the hosts an elastic job's workers may use are what a script
// of the user's prints, polled while the job runs (docs/launch.md, "Hosts
// from a discovery script").
//
// The script's contract: run with no arguments and the launcher's
// environment, it prints the hosts available now, one per line in a
// hostfile's form ("h1", "h2:4", "h3 slots=2", comments allowed; hostfile.h),
// and exits 0 within the time-out. Anything else (a non-zero exit, a
// time-out, a line that is not a host, no host at all) is an error that
// names the script and what was wrong.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launch/hostfile.h"

namespace tandem::launch {

/// Runs `script` once with environment `env` and returns the hosts it
/// printed. Throws InvalidArgument naming the script and what was wrong:
/// "the host discovery script ./hosts.sh exited 3: <its last line on
/// stderr>", "... gave no answer within 10000 ms (killed)", or the
/// hostfile's error of a bad line or of no host at all ("the host discovery
/// script ./hosts.sh's output names no host"). Throws IoError when it cannot be
/// started. Any thread (it waits for its own child only).
std::vector<HostSlots> DiscoverHosts(const std::string& script,
                                     const std::map<std::string, std::string>& env,
                                     std::chrono::milliseconds timeout);

/// The hosts of a discovery script, polled on a thread of its own.
///
/// Thread-safety: Changed() and TakeError() may be called from any one
/// thread while the poller runs; the destructor stops and joins it.
class HostDiscovery {
 public:
  /// Starts polling: runs the script every `interval` (after each answer),
  /// each run within `timeout`. `initial` is the list in force (the
  /// launcher's first run of the script), which Changed() returns once.
  /// The poller's thread inherits the calling thread's signal mask: build
  /// it where the launcher's signals are blocked (after the supervisor).
  HostDiscovery(std::string script, std::map<std::string, std::string> env,
                std::chrono::milliseconds interval, std::chrono::milliseconds timeout,
                std::vector<HostSlots> initial);
  ~HostDiscovery();

  HostDiscovery(const HostDiscovery&) = delete;
  HostDiscovery& operator=(const HostDiscovery&) = delete;

  /// The hosts, when they differ from those this method returned last (the
  /// first call returns `initial`); nothing when they did not change.
  std::optional<std::vector<HostSlots>> Changed();

  /// The hosts in force now (the latest successful run's, or `initial`).
  std::vector<HostSlots> Latest();

  /// The error of the latest run, once, when the latest run failed and its
  /// message differs from the last one taken; the hosts stay as they were.
  std::optional<std::string> TakeError();

 private:
  void Poll();

  const std::string script_;
  const std::map<std::string, std::string> env_;
  const std::chrono::milliseconds interval_;
  const std::chrono::milliseconds timeout_;

  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::vector<HostSlots> latest_;                   // guarded by mu_
  std::optional<std::vector<HostSlots>> returned_;  // guarded by mu_
  std::string error_;                               // guarded by mu_: the latest run's, or ""
  std::string error_taken_;                         // guarded by mu_
  std::thread thread_;
};

/// "h1:1, h2:2": hosts as a hostfile's short form, for the launcher's lines.
std::string DescribeHosts(const std::vector<HostSlots>& hosts);

}  // namespace tandem::launch
