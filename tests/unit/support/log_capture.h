// A Logger whose lines go to an unlinked temporary file that a test reads
// back (warnings a transport prints for a peer it dropped, say).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "base/logger.h"

namespace tandem::testing {

/// Thread-safety: logger() is as thread-safe as base::Logger; Text() and
/// WaitFor() may run on any thread while others log.
class LogCapture {
 public:
  LogCapture() : file_(std::tmpfile()), logger_("test", 1, ::fileno(file_)) {}
  ~LogCapture() { std::fclose(file_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  base::Logger& logger() { return logger_; }

  /// Everything logged so far.
  std::string Text() {
    std::string out;
    char buf[4096];
    ssize_t n;
    off_t at = 0;
    while ((n = ::pread(::fileno(file_), buf, sizeof(buf), at)) > 0) {
      out.append(buf, static_cast<size_t>(n));
      at += n;
    }
    return out;
  }

  /// Waits up to `patience` for `needle` to be logged; true when it was.
  bool WaitFor(const std::string& needle,
               std::chrono::milliseconds patience = std::chrono::seconds(30)) {
    auto until = std::chrono::steady_clock::now() + patience;
    while (std::chrono::steady_clock::now() < until) {
      if (Text().find(needle) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

 private:
  FILE* file_;
  base::Logger logger_;
};

}  // namespace tandem::testing
