// The state behind a KVHandle: one asynchronous store call made of parts
// (one request per server it touches), each finished by two events: the
// server's reply, and, for a request that borrows caller memory, the
// transport's word that the memory was sent. The call is done when every
// event came in; its error is the first part's error.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/logger.h"
#include "base/wait_report.h"

namespace tandem::kv {

/// Thread-safety: any thread; internally locked. Completion callbacks run on
/// the thread that delivers the last event, without the lock.
class KvOperation {
 public:
  /// `what` names the call in errors ("push of key 3").
  KvOperation(std::string what, std::chrono::milliseconds default_timeout);

  /// Expects `events` more events from `server` (-1: none, a local step).
  void Expect(int server, int events);
  /// One expected event of `server` arrived, failed when `error` is set.
  void Event(int server, std::exception_ptr error = nullptr);
  /// Runs `fn` once every event arrived and none failed, before waiters
  /// wake (e.g. copying a pulled value to further outputs). Set before the
  /// first Expect.
  void OnSuccess(std::function<void()> fn) { on_success_ = std::move(fn); }
  /// Keeps `p` alive until the call is done (temporary buffers).
  void Keep(std::shared_ptr<void> p);

  /// Blocks until done; rethrows the call's error. Throws Timeout naming the
  /// call and the servers it still waited for.
  void Wait(std::chrono::milliseconds timeout) const;
  void Wait() const { Wait(default_timeout_); }
  bool done() const;
  /// Where Wait reports a wait that goes on, every `interval`
  /// (TANDEM_WAIT_REPORT_SECONDS); none by default. Any thread.
  void SetLogger(const base::Logger* log,
                 std::chrono::milliseconds interval = base::kDefaultWaitReportInterval);
  const std::string& what() const { return what_; }
  /// Where Wait looks for the cause of a PeerLost error before it throws
  /// it: `lookup` returns the job's failure (Membership::AwaitFailure,
  /// bounded) or null, and Wait throws what it returns instead (the root
  /// cause rather than a peer that left because of it). Set before the
  /// first Expect; any thread.
  void SetRootCause(std::function<std::exception_ptr()> lookup);

 private:
  const std::string what_;
  const std::chrono::milliseconds default_timeout_;
  std::string OutstandingText() const;  // requires mu_
  std::function<void()> on_success_;
  std::function<std::exception_ptr()> root_cause_;  // set before the first Expect
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::map<int, int> outstanding_;     // events per server; guarded by mu_
  int total_ = 0;                      // guarded by mu_
  bool finished_ = false;              // guarded by mu_
  std::exception_ptr error_;           // guarded by mu_
  const base::Logger* log_ = nullptr;  // guarded by mu_
  std::chrono::milliseconds report_interval_ = base::kDefaultWaitReportInterval;  // guarded by mu_
  std::vector<std::shared_ptr<void>> keep_;                                       // guarded by mu_
};

}  // namespace tandem::kv
