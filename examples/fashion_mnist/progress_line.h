// The per-epoch progress line: a bar, the running loss, samples/s of the
// whole job and the share of step time spent in communication.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace fashion_mnist {

/// Prints an epoch's progress to a stream: redrawn in place on a terminal,
/// otherwise (under `tandem launch`, whose output is a pipe) one line at
/// every tenth of the epoch.
///
/// Thread-safety: one thread (the training loop).
class ProgressLine {
 public:
  /// `steps` steps of `global_batch` examples in epoch `epoch` (1-based) of
  /// `epochs`; prints to `out`, or only keeps the figures when it is null.
  /// Thread: the caller's.
  ProgressLine(FILE* out, int epoch, int epochs, int64_t steps, int64_t global_batch);

  /// Records step `step` (1-based): its mean loss, its duration and how much
  /// of it was communication (seconds); prints when due.
  void Update(int64_t step, double loss, double step_seconds, double comm_seconds);

  /// Samples per second of the whole job, mean loss and communication share
  /// over the steps so far.
  double samples_per_second() const;
  double mean_loss() const {
    return steps_done_ ? loss_sum_ / static_cast<double>(steps_done_) : 0;
  }
  double comm_share() const { return step_seconds_ > 0 ? comm_seconds_ / step_seconds_ : 0; }

 private:
  std::string Render(int64_t step) const;

  FILE* out_;
  bool tty_;
  int epoch_;
  int epochs_;
  int64_t steps_;
  int64_t global_batch_;
  int64_t steps_done_ = 0;
  double loss_sum_ = 0;
  double step_seconds_ = 0;
  double comm_seconds_ = 0;
  int next_tenth_ = 1;
};

}  // namespace fashion_mnist
