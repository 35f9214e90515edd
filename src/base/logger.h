// Line-oriented logging with MXNet's PS_VERBOSE levels.
//
// A line reads "[2026-11-27T00:35:32.648Z worker 3 I] text": the time in
// ISO 8601, UTC with its zone, the tag, the level (I, W, E, 1, 2).
//
// A Logger belongs to one node (its tag names the role and, once known, the
// rank); it is built explicitly and passed by reference, so two nodes in one
// test process log under their own names. Each line is written with one
// write() so lines of concurrent threads and processes never interleave.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>

namespace tandem::base {

/// Thread-safety: every method may be called from any thread.
class Logger {
 public:
  /// `tag` prefixes every line (e.g. "worker 3"); `verbosity` is PS_VERBOSE;
  /// lines go to file descriptor `fd` (stderr by default). `quiet` (an
  /// explicit PS_VERBOSE=0) drops Info lines too: only Warn and Error remain.
  explicit Logger(std::string tag, int verbosity = 0, int fd = 2, bool quiet = false);

  /// Replaces the tag, e.g. once the scheduler has assigned a rank.
  void SetTag(std::string tag);
  /// The current tag.
  std::string tag() const;
  /// PS_VERBOSE's level: 0, 1 or 2.
  int verbosity() const { return verbosity_; }

  /// Printed unless quiet: start-up facts (role, contract, addresses).
  template <typename... Args>
  void Info(fmt::format_string<Args...> f, Args&&... args) const {
    if (!quiet_) Write('I', fmt::format(f, std::forward<Args>(args)...));
  }
  /// Always printed; something looks wrong but the process goes on.
  template <typename... Args>
  void Warn(fmt::format_string<Args...> f, Args&&... args) const {
    Write('W', fmt::format(f, std::forward<Args>(args)...));
  }
  /// Always printed; an operation or the process failed.
  template <typename... Args>
  void Error(fmt::format_string<Args...> f, Args&&... args) const {
    Write('E', fmt::format(f, std::forward<Args>(args)...));
  }
  /// PS_VERBOSE >= 1: connections, node ids, barriers.
  template <typename... Args>
  void V1(fmt::format_string<Args...> f, Args&&... args) const {
    if (verbosity_ >= 1) Write('1', fmt::format(f, std::forward<Args>(args)...));
  }
  /// PS_VERBOSE >= 2: every message.
  template <typename... Args>
  void V2(fmt::format_string<Args...> f, Args&&... args) const {
    if (verbosity_ >= 2) Write('2', fmt::format(f, std::forward<Args>(args)...));
  }

 private:
  void Write(char level, std::string_view text) const;

  mutable std::mutex mu_;
  std::string tag_;  // guarded by mu_
  const int verbosity_;
  const int fd_;
  const bool quiet_;
};

}  // namespace tandem::base
