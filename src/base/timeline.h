// A timeline of communication in Chrome's Trace Event Format, which
// chrome://tracing and Perfetto open: one process track per node ("worker
// 3"), one thread track per kind of activity ("push", "allreduce",
// "server merge"), one complete ("X") event per operation with its bytes
// and key or tensor in `args`. Enabled by TANDEM_TIMELINE=<file>
// (docs/metrics.md).
//
// Each process writes its own file: a JSON object {"traceEvents": [...]}
// that is complete once the Timeline is closed. Timestamps are the
// machine's monotonic clock in microseconds, so files of processes on one
// host line up; MergeTimelines joins them into one file (`tandem launch`
// does so when the job ends).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"

namespace tandem::base {

/// Thread-safety: every method may be called from any thread; events are
/// serialised under a lock and written in batches.
class Timeline {
 public:
  /// Creates (truncates) `path` and names this process's track
  /// `process_name` with track id `pid`. Throws IoError naming the path.
  Timeline(const std::string& path, int pid, const std::string& process_name);
  /// Close()s, swallowing errors.
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  /// Renames the process track (once the node knows its rank).
  void SetProcessName(const std::string& name);

  /// Records an operation that ran from `start` to `end` on the thread
  /// track `track`, with `args` shown in the viewer.
  void Span(std::string_view track, std::string_view name, SteadyTime start, SteadyTime end,
            const std::map<std::string, std::string>& args = {});

  /// Records a moment (a lost peer, a barrier's release).
  void Instant(std::string_view track, std::string_view name, SteadyTime at);

  /// Writes what is buffered and the closing brackets; later events are
  /// dropped. Throws IoError.
  void Close();

  /// Events recorded so far.
  uint64_t events() const;

 private:
  int TrackId(std::string_view track);  // requires mu_
  void Append(std::string event);       // requires mu_
  void FlushLocked();                   // requires mu_

  mutable std::mutex mu_;
  std::FILE* file_ = nullptr;
  std::string path_;
  int pid_;
  std::string buffer_;
  bool first_ = true;
  uint64_t events_ = 0;
  std::map<std::string, int, std::less<>> tracks_;
};

/// What MergeTimelines did. Thread-safety: a value type.
struct TimelineMerge {
  size_t events = 0;  ///< events in the merged file
  /// Inputs without their end (a process killed before it closed its
  /// timeline): their complete events were kept, a cut last one dropped.
  std::vector<std::string> unfinished;
  /// Inputs that held no event at all (a process killed before its first
  /// write): counted with the missing processes, not the unfinished ones.
  std::vector<std::string> empty;
};

/// Joins the trace files `inputs` (each as Timeline writes it) into one
/// file `output`. A process id that an earlier input already used (files
/// of processes on different hosts) is renumbered above 4194304 (Linux's
/// largest pid), so that every process keeps its own track. An unfinished
/// file (a killed process's) contributes every complete event. `missing`
/// names the processes that left no file; they, the empty inputs (no event:
/// as good as missing) and the unfinished inputs (by `labels`, parallel to
/// `inputs`, when given; else by path) are recorded in the output's
/// "otherData" ("tandem_missing": the missing then the empty ones,
/// "tandem_unfinished"), which trace viewers show as the trace's metadata. Throws IoError
/// (unreadable or unwritable file) or InvalidArgument (a file that is not a trace at all), naming
/// the file.
TimelineMerge MergeTimelines(const std::string& output, const std::vector<std::string>& inputs,
                             const std::vector<std::string>& missing = {},
                             const std::vector<std::string>& labels = {});

}  // namespace tandem::base
