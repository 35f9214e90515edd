// The launcher's view of its children's output: every line a child writes
// reaches the launcher's stdout or stderr whole and prefixed with the
// child's label ("[worker 3] loss=0.25").
//
// One thread (the supervisor's) owns the sinks and every prefixer, and each
// line goes out in one write() where the kernel takes it at once, so lines
// of different children never mix within a line, whatever reads the
// launcher's output.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace tandem::launch {

/// One file descriptor of the launcher (its stdout or stderr) that whole
/// lines are written to. Does not own the descriptor.
///
/// A reader that went away (EPIPE, e.g. `tandem launch ... | head`) or any
/// other write error turns the sink off: later lines are dropped, so the
/// launcher keeps draining its children's pipes and the job is not stalled
/// by a closed terminal.
/// Thread-safety: one thread at a time (the supervisor's).
class OutputSink {
 public:
  /// Writes to `fd`, which must stay open as long as the sink is used.
  explicit OutputSink(int fd) : fd_(fd) {}

  /// Writes `line` (which should end in '\n') completely, retrying short
  /// writes and EINTR and waiting for a non-blocking descriptor to drain.
  /// Never throws; after a write error the sink drops everything.
  void WriteLine(std::string_view line);

  /// True once a write failed and the sink drops its input.
  bool broken() const { return broken_; }

 private:
  int fd_;
  bool broken_ = false;
};

/// Splits one stream of a child (its stdout or its stderr) into lines and
/// writes each, prefixed, to a sink.
///
/// Bytes after the last newline are held until the line is complete or
/// Flush() is called (the stream ended); a flushed partial line gets the
/// newline it lacked. A line longer than `max_line` bytes goes out in
/// pieces of `max_line` bytes, each as its own prefixed line, so a child
/// that never writes a newline cannot grow the launcher's memory.
/// Thread-safety: one thread at a time (the supervisor's).
class LinePrefixer {
 public:
  /// Each line is written as `prefix` + line + "\n" to `*sink`, which must
  /// outlive the prefixer. Requires max_line > 0.
  LinePrefixer(std::string prefix, OutputSink* sink, size_t max_line = kDefaultMaxLine);

  /// Feeds the next bytes of the stream; writes every line they complete.
  void Append(std::string_view bytes);

  /// Writes the held partial line, if any, ending it with a newline.
  void Flush();

  /// Calls `observer` with every line (without prefix and newline) just
  /// before it is written; the supervisor reads what a rank launcher relays
  /// (ProcessSpec::relays_rank_exec). Empty: none.
  void SetObserver(std::function<void(std::string_view)> observer) {
    observer_ = std::move(observer);
  }

  /// True when bytes of an unfinished line are held.
  bool has_partial() const { return !partial_.empty(); }

  static constexpr size_t kDefaultMaxLine = 64 * 1024;

 private:
  void Emit(std::string_view text);

  std::string prefix_;
  OutputSink* sink_;
  size_t max_line_;
  std::function<void(std::string_view)> observer_;
  std::string partial_;  // the current line's bytes so far, without a newline
  std::string scratch_;  // the line being written, reused to spare allocations
};

}  // namespace tandem::launch
