#include "base/logger.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <ctime>

namespace tandem::base {

Logger::Logger(std::string tag, int verbosity, int fd, bool quiet)
    : tag_(std::move(tag)), verbosity_(verbosity), fd_(fd), quiet_(quiet) {}

void Logger::SetTag(std::string tag) {
  std::lock_guard lock(mu_);
  tag_ = std::move(tag);
}

std::string Logger::tag() const {
  std::lock_guard lock(mu_);
  return tag_;
}

void Logger::Write(char level, std::string_view text) const {
  auto now = std::chrono::system_clock::now();
  std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  std::string line;
  {
    std::lock_guard lock(mu_);
    line = fmt::format("[{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z {} {}] {}\n", tm.tm_year + 1900,
                       tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, millis, tag_,
                       level, text);
  }
  const char* data = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(fd_, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere left to report a failure to log
    data += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace tandem::base
