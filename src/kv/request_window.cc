#include "kv/request_window.h"

#include <fmt/format.h>

#include "tandem/error.h"

namespace tandem::kv {

RequestWindow::RequestWindow(uint64_t max_bytes, base::Gauge* held, base::Counter* refused)
    : max_bytes_(max_bytes), held_gauge_(held), refused_(refused) {
  if (max_bytes_ == 0) {
    throw InvalidArgument("a server's request window needs a bound of at least 1 byte, got 0");
  }
}

std::string RequestWindow::Admit(net::ConnectionId c, uint64_t request_id, uint64_t bytes) {
  std::lock_guard lock(mu_);
  Books& b = books_[c];
  if (b.bytes != 0 && b.bytes >= max_bytes_) {
    if (refused_) refused_->Add(1);
    return fmt::format(
        "refused: this server already holds {} B of unanswered requests from this worker "
        "({} requests), at or over its bound of {} B (TANDEM_KV_INFLIGHT_BYTES); a request of "
        "{} B more would grow it further. A tandem worker waits for answers before it exceeds "
        "the bound: is its TANDEM_KV_INFLIGHT_BYTES larger than the server's?",
        b.bytes, b.requests.size(), max_bytes_, bytes);
  }
  // A request id used twice (no tandem worker does) is counted twice and
  // leaves the books with its first answer.
  b.requests[request_id] += bytes;
  b.bytes += bytes;
  if (held_gauge_) held_gauge_->Add(static_cast<double>(bytes));
  return {};
}

void RequestWindow::Release(net::ConnectionId c, uint64_t request_id) {
  std::lock_guard lock(mu_);
  auto b = books_.find(c);
  if (b == books_.end()) return;
  auto r = b->second.requests.find(request_id);
  if (r == b->second.requests.end()) return;
  b->second.bytes -= r->second;
  if (held_gauge_) held_gauge_->Add(-static_cast<double>(r->second));
  b->second.requests.erase(r);
}

void RequestWindow::Forget(net::ConnectionId c) {
  std::lock_guard lock(mu_);
  auto b = books_.find(c);
  if (b == books_.end()) return;
  if (held_gauge_) held_gauge_->Add(-static_cast<double>(b->second.bytes));
  books_.erase(b);
}

uint64_t RequestWindow::held(net::ConnectionId c) const {
  std::lock_guard lock(mu_);
  auto b = books_.find(c);
  return b == books_.end() ? 0 : b->second.bytes;
}

}  // namespace tandem::kv
