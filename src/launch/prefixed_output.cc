#include "launch/prefixed_output.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace tandem::launch {

void OutputSink::WriteLine(std::string_view line) {
  while (!broken_ && !line.empty()) {
    ssize_t n = ::write(fd_, line.data(), line.size());
    if (n > 0) {
      line.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // The launcher inherited a non-blocking descriptor: wait until the
      // reader makes room rather than dropping the rest of the line.
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, -1) < 0 && errno != EINTR) broken_ = true;
      continue;
    }
    broken_ = true;  // EPIPE, EBADF, ENOSPC...: nobody can read us any more
  }
}

LinePrefixer::LinePrefixer(std::string prefix, OutputSink* sink, size_t max_line)
    : prefix_(std::move(prefix)), sink_(sink), max_line_(max_line == 0 ? 1 : max_line) {}

void LinePrefixer::Append(std::string_view bytes) {
  while (!bytes.empty()) {
    size_t newline = bytes.find('\n');
    size_t room = max_line_ - partial_.size();
    if (newline != std::string_view::npos && newline <= room) {
      partial_.append(bytes.substr(0, newline));
      Emit(partial_);
      partial_.clear();
      bytes.remove_prefix(newline + 1);
    } else if (bytes.size() < room) {
      partial_.append(bytes);
      return;
    } else {
      // The line is longer than max_line_: write what fills the limit.
      partial_.append(bytes.substr(0, room));
      Emit(partial_);
      partial_.clear();
      bytes.remove_prefix(room);
    }
  }
}

void LinePrefixer::Flush() {
  if (partial_.empty()) return;
  Emit(partial_);
  partial_.clear();
}

void LinePrefixer::Emit(std::string_view text) {
  if (observer_) observer_(text);
  scratch_.clear();
  scratch_.reserve(prefix_.size() + text.size() + 1);
  scratch_.append(prefix_);
  scratch_.append(text);
  scratch_.push_back('\n');
  sink_->WriteLine(scratch_);
}

}  // namespace tandem::launch
