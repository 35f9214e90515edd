// Completion of asynchronous store calls.
#include "kv/kv_operation.h"

#include <fmt/format.h>

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

void KvOperation::Wait(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return finished_; })) {
    std::string servers;
    for (const auto& [server, n] : outstanding_) {
      if (!servers.empty()) servers += ", ";
      servers += server < 0 ? std::string("local work") : fmt::format("server {}", server);
    }
    throw Timeout(fmt::format("waited {} ms for {}; still waiting for: {}", timeout.count(), what_,
                              servers.empty() ? "nothing (finishing)" : servers));
  }
  if (error_) std::rethrow_exception(error_);
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
