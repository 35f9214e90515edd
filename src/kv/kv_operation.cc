// Completion of asynchronous store calls.
#include "kv/kv_operation.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>

#include "tandem/error.h"
#include "tandem/kvstore.h"

namespace tandem::kv {

KvOperation::KvOperation(std::string what, std::chrono::milliseconds default_timeout)
    : what_(std::move(what)), default_timeout_(default_timeout) {}

void KvOperation::Expect(int server, int events) {
  std::lock_guard lock(mu_);
  outstanding_[server] += events;
  total_ += events;
}

void KvOperation::Keep(std::shared_ptr<void> p) {
  std::lock_guard lock(mu_);
  keep_.push_back(std::move(p));
}

void KvOperation::Event(int server, std::exception_ptr error) {
  bool last = false;
  bool ok = false;
  {
    std::lock_guard lock(mu_);
    if (error && !error_) error_ = error;
    if (--outstanding_[server] == 0) outstanding_.erase(server);
    last = --total_ == 0;
    ok = last && !error_;
  }
  if (!last) return;
  if (ok && on_success_) {
    try {
      on_success_();
    } catch (...) {
      std::lock_guard lock(mu_);
      error_ = std::current_exception();
    }
  }
  std::vector<std::shared_ptr<void>> release;
  {
    std::lock_guard lock(mu_);
    finished_ = true;
    release.swap(keep_);
  }
  cv_.notify_all();
}

void KvOperation::SetLogger(const base::Logger* log, std::chrono::milliseconds interval) {
  std::lock_guard lock(mu_);
  log_ = log;
  report_interval_ = interval;
}

std::string KvOperation::OutstandingText() const {
  std::string servers;
  for (const auto& [server, n] : outstanding_) {
    if (!servers.empty()) servers += ", ";
    servers += server < 0 ? std::string("local work") : fmt::format("server {}", server);
  }
  return servers.empty() ? "nothing (finishing)" : servers;
}

void KvOperation::Wait(std::chrono::milliseconds timeout) const {
  const base::SteadyClock steady;
  std::unique_lock lock(mu_);
  // No wait goes report_interval_ without a line saying what it waits for
  // (a dist_sync round, for one, lasts until every worker pushed).
  base::WaitReport report(steady, report_interval_);
  while (!cv_.wait_for(lock, std::min(report.NextIn(), timeout - report.Waited()),
                       [&] { return finished_; })) {
    if (report.Waited() >= timeout) {
      throw Timeout(fmt::format("waited {} ms for {}; still waiting for: {}", timeout.count(),
                                what_, OutstandingText()));
    }
    if (log_ != nullptr && report.TakeDue()) {
      log_->Warn("still waiting for {} {} (gives up after {} s, TANDEM_KV_TIMEOUT): waiting for {}",
                 what_, report.Lasted(),
                 std::chrono::duration_cast<std::chrono::seconds>(timeout).count(),
                 OutstandingText());
    }
  }
  if (!error_) return;
  if (root_cause_) {
    try {
      std::rethrow_exception(error_);
    } catch (const PeerLost&) {
      lock.unlock();  // the lookup waits, and a failure listener may take mu_
      if (std::exception_ptr root = root_cause_()) std::rethrow_exception(root);
    } catch (...) {  // NOLINT(bugprone-empty-catch): not a lost peer; thrown below
    }
  }
  std::rethrow_exception(error_);
}

void KvOperation::SetRootCause(std::function<std::exception_ptr()> lookup) {
  root_cause_ = std::move(lookup);
}

bool KvOperation::done() const {
  std::lock_guard lock(mu_);
  return finished_;
}

}  // namespace tandem::kv

namespace tandem {

void KVHandle::Wait() const {
  if (op_) op_->Wait();
}
void KVHandle::Wait(std::chrono::milliseconds timeout) const {
  if (op_) op_->Wait(timeout);
}
bool KVHandle::Done() const { return !op_ || op_->done(); }

}  // namespace tandem
