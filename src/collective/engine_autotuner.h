// Online tuning of the framework engine's settings (Horovod's
// HOROVOD_AUTOTUNE): the fusion threshold, the cycle time and the algorithm
// of allreduces that leave it to tandem, chosen from the engine's measured
// throughput while the job trains. docs/collectives.md ("Autotune") gives
// the search and its variables.
//
// The tuner only scores and decides; it runs on rank 0's engine thread,
// and the engine carries rank 0's settings to every rank in its cycle
// message, so that every rank fuses and reduces alike in the same cycle.
//
// The search is a coordinate search over fixed grids, one knob after the
// other: after `warmup_samples` samples at the starting settings, each
// candidate value of the fusion threshold is held for two samples, in the
// mirrored order A B C C B A (a throughput that drifts steadily during the
// search then favours no candidate), and the best mean is kept when it
// beats the value in use by more than `min_gain`; then the cycle time's
// candidates, then the algorithm's. A sample ends when some tensor name
// completed `steps_per_sample` times since it began (a training step
// reduces each gradient once), and its score is the bytes of the requests
// completed in it over its wall time.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/logger.h"
#include "collective/negotiation_message.h"
#include "tandem/collective.h"

namespace tandem::collective {

/// How the tuner samples (FusionEngine::Options carries these).
struct AutotuneConfig {
  int warmup_samples = 3;     ///< samples discarded at the start
  int steps_per_sample = 10;  ///< completions of one name that end a sample
  int max_samples = 40;       ///< scored samples at most; then the best so far stays
  /// A candidate replaces the value in use only when its mean score is
  /// higher by more than this fraction (noise must not move the settings).
  double min_gain = 0.03;
  std::string log_path;     ///< a CSV of every sample when not empty
  std::string result_path;  ///< the chosen settings as environment variables when not empty
};

/// Thread-safety: none; the engine's thread owns it.
class EngineAutotuner {
 public:
  using Clock = std::chrono::steady_clock;

  /// Starts from `start`, whose values are the first candidates of each
  /// knob. `algorithms` are the algorithm candidates besides `start`'s
  /// (the engine offers hierarchical only where the group spans several
  /// hosts of equal size). `log` is borrowed. Throws ConfigError naming a
  /// log or result file that cannot be opened.
  EngineAutotuner(EngineSettings start, AutotuneConfig config,
                  std::vector<AllReduceAlgorithm> algorithms, base::Logger& log);
  ~EngineAutotuner();
  EngineAutotuner(const EngineAutotuner&) = delete;
  EngineAutotuner& operator=(const EngineAutotuner&) = delete;

  /// Records the requests one cycle completed (`names`, `bytes` of them in
  /// all), the cycle ending at `now`. Returns true when settings() changed.
  bool Observe(const std::vector<std::string>& names, size_t bytes, Clock::time_point now);

  /// The settings to use from the next cycle on.
  const EngineSettings& settings() const { return settings_; }
  /// True once every knob was decided (or max_samples was reached).
  /// A full search scores 2 x (6 or 7 thresholds + 5 or 6 cycle times + 3
  /// or 4 algorithms) samples, 28 to 34.
  bool done() const { return done_; }
  /// Samples scored so far (warm-up samples not counted).
  int samples() const { return scored_; }

 private:
  enum class Knob { kThreshold = 0, kCycleTime = 1, kAlgorithm = 2 };
  struct Candidate {
    EngineSettings settings;
    double sum = 0;   // of its samples' scores, MB/s
    int samples = 0;  // measured so far
    double Mean() const { return samples > 0 ? sum / samples : 0; }
  };

  // The candidates of `knob` around the current settings.
  std::vector<Candidate> CandidatesOf(Knob knob) const;
  // The candidate measured at `position` of the mirrored order.
  size_t CandidateAt(size_t position) const;
  // Ends the current sample: scores it, moves to the next candidate.
  void EndSample(Clock::time_point now);
  // Keeps the best candidate of the current knob and starts the next.
  void FinishKnob();
  void Finish(const std::string& why);
  void LogRow(const char* phase, double seconds, double score);

  EngineSettings settings_;
  const AutotuneConfig config_;
  const std::vector<AllReduceAlgorithm> algorithms_;
  base::Logger& log_;
  std::ofstream csv_;

  int warmup_left_;
  int scored_ = 0;
  int sample_ = 0;  // every sample, warm-up included, for the log
  bool done_ = false;
  Knob knob_ = Knob::kThreshold;
  std::vector<Candidate> candidates_;
  size_t position_ = 0;  // in the mirrored order, 0 .. 2 * candidates - 1
  double best_score_ = -1;

  bool started_ = false;
  Clock::time_point sample_start_;
  std::map<std::string, int> counts_;  // completions per name in this sample
  size_t bytes_ = 0;
};

}  // namespace tandem::collective
