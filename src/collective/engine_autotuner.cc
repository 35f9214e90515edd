// The framework engine's tuner (engine_autotuner.h; docs/collectives.md,
// "Autotune").
#include "collective/engine_autotuner.h"

#include <fmt/format.h>

#include <algorithm>

#include "tandem/error.h"

namespace tandem::collective {

namespace {

// The grids every search walks, besides the starting value.
const std::vector<size_t>& ThresholdGrid() {
  static const std::vector<size_t> grid = {
      0, size_t{1} << 20, size_t{4} << 20, size_t{16} << 20, size_t{64} << 20, size_t{128} << 20};
  return grid;
}

const std::vector<std::chrono::microseconds>& CycleGrid() {
  using std::chrono::microseconds;
  static const std::vector<microseconds> grid = {microseconds(500), microseconds(1000),
                                                 microseconds(2500), microseconds(5000),
                                                 microseconds(10000)};
  return grid;
}

double Milliseconds(std::chrono::microseconds t) { return static_cast<double>(t.count()) / 1000.0; }

}  // namespace

EngineAutotuner::EngineAutotuner(EngineSettings start, AutotuneConfig config,
                                 std::vector<AllReduceAlgorithm> algorithms, base::Logger& log)
    : settings_(start),
      config_(std::move(config)),
      algorithms_(std::move(algorithms)),
      log_(log),
      warmup_left_(std::max(0, config_.warmup_samples)) {
  if (config_.steps_per_sample < 1 || config_.max_samples < 1) {
    throw ConfigError(
        fmt::format("autotune: steps per sample ({}) and max samples ({}) must be at least 1",
                    config_.steps_per_sample, config_.max_samples));
  }
  if (!config_.log_path.empty()) {
    csv_.open(config_.log_path, std::ios::out | std::ios::trunc);
    if (!csv_) {
      throw ConfigError(
          fmt::format("autotune: cannot open the log file '{}' for writing", config_.log_path));
    }
    csv_ << "sample,phase,fusion_threshold_bytes,cycle_time_ms,algorithm,seconds,score_mb_per_s\n";
    csv_.flush();
  }
  candidates_ = CandidatesOf(knob_);
  log_.Info(
      "autotune: starting from {}; {} warm-up sample(s), then each knob's candidates for "
      "one sample of {} step(s)",
      settings_.Describe(), warmup_left_, config_.steps_per_sample);
}

EngineAutotuner::~EngineAutotuner() = default;

std::vector<EngineAutotuner::Candidate> EngineAutotuner::CandidatesOf(Knob knob) const {
  std::vector<Candidate> out;
  auto add = [&](EngineSettings s) {
    for (const Candidate& c : out) {
      if (c.settings == s) return;
    }
    out.push_back({s});
  };
  add(settings_);  // the value in use is measured first: no switch needed
  EngineSettings s = settings_;
  switch (knob) {
    case Knob::kThreshold:
      for (size_t t : ThresholdGrid()) {
        s.fusion_threshold = t;
        add(s);
      }
      break;
    case Knob::kCycleTime:
      for (auto t : CycleGrid()) {
        s.cycle_time = t;
        add(s);
      }
      break;
    case Knob::kAlgorithm:
      add({s.fusion_threshold, s.cycle_time, AllReduceAlgorithm::kAuto});
      for (AllReduceAlgorithm a : algorithms_) {
        s.algorithm = a;
        add(s);
      }
      break;
  }
  return out;
}

bool EngineAutotuner::Observe(const std::vector<std::string>& names, size_t bytes,
                              Clock::time_point now) {
  if (done_ || names.empty()) return false;
  if (!started_) {
    // The first completions open the first sample; they count in it.
    started_ = true;
    sample_start_ = now;
  }
  bytes_ += bytes;
  bool end = false;
  for (const std::string& n : names) end = ++counts_[n] >= config_.steps_per_sample || end;
  if (!end) return false;
  const EngineSettings before = settings_;
  EndSample(now);
  return !(settings_ == before);
}

size_t EngineAutotuner::CandidateAt(size_t position) const {
  // A B C C B A: each candidate twice, mirrored, so that a steady drift of
  // the throughput during the search adds the same to every candidate's sum.
  const size_t k = candidates_.size();
  return position < k ? position : 2 * k - 1 - position;
}

void EngineAutotuner::EndSample(Clock::time_point now) {
  const double seconds = std::chrono::duration<double>(now - sample_start_).count();
  const double score = seconds > 0 ? static_cast<double>(bytes_) / seconds / 1e6 : 0;
  ++sample_;
  counts_.clear();
  bytes_ = 0;
  sample_start_ = now;
  if (warmup_left_ > 0) {
    --warmup_left_;
    LogRow("warmup", seconds, score);
    return;
  }
  ++scored_;
  Candidate& c = candidates_[CandidateAt(position_)];
  c.sum += score;
  ++c.samples;
  LogRow(knob_ == Knob::kThreshold   ? "fusion_threshold"
         : knob_ == Knob::kCycleTime ? "cycle_time"
                                     : "algorithm",
         seconds, score);
  if (scored_ >= config_.max_samples) {
    FinishKnob();
    Finish(fmt::format("the limit of {} scored samples was reached", config_.max_samples));
    return;
  }
  if (++position_ < 2 * candidates_.size()) {
    settings_ = candidates_[CandidateAt(position_)].settings;
    return;
  }
  FinishKnob();
  if (knob_ == Knob::kAlgorithm) {
    Finish("every knob was searched");
    return;
  }
  knob_ = static_cast<Knob>(static_cast<int>(knob_) + 1);
  candidates_ = CandidatesOf(knob_);
  position_ = 0;
  // The first candidate is the value just chosen: it is measured anew
  // under this knob, so its score is comparable with its neighbours'.
}

void EngineAutotuner::FinishKnob() {
  // The incumbent (candidate 0, the value in use when the knob began)
  // stays unless another one's mean beats it by more than min_gain.
  const Candidate& incumbent = candidates_[0];
  if (incumbent.samples == 0) return;
  const Candidate* best = &incumbent;
  for (const Candidate& c : candidates_) {
    if (c.samples > 0 && c.Mean() > best->Mean()) best = &c;
  }
  if (best->Mean() <= incumbent.Mean() * (1.0 + config_.min_gain)) best = &incumbent;
  settings_ = best->settings;
  best_score_ = best->Mean();
}

void EngineAutotuner::Finish(const std::string& why) {
  done_ = true;
  LogRow("chosen", 0, best_score_);
  log_.Info(
      "autotune: chose {} ({:.1f} MB/s through the engine) after {} scored sample(s): {}; "
      "to reuse it: TANDEM_FUSION_THRESHOLD={} TANDEM_CYCLE_TIME={}{}",
      settings_.Describe(), best_score_, scored_, why, settings_.fusion_threshold,
      Milliseconds(settings_.cycle_time),
      settings_.algorithm == AllReduceAlgorithm::kAuto
          ? std::string()
          : " TANDEM_ALLREDUCE_ALGORITHM=" + AllReduceAlgorithmName(settings_.algorithm));
  if (config_.result_path.empty()) return;
  std::ofstream out(config_.result_path, std::ios::out | std::ios::trunc);
  out << fmt::format("TANDEM_FUSION_THRESHOLD={}\nTANDEM_CYCLE_TIME={}\n",
                     settings_.fusion_threshold, Milliseconds(settings_.cycle_time));
  if (settings_.algorithm != AllReduceAlgorithm::kAuto) {
    out << "TANDEM_ALLREDUCE_ALGORITHM=" << AllReduceAlgorithmName(settings_.algorithm) << "\n";
  }
  out.flush();
  if (!out) {
    log_.Error("autotune: could not write the chosen settings to '{}'", config_.result_path);
  }
}

void EngineAutotuner::LogRow(const char* phase, double seconds, double score) {
  // The row describes the settings the sample ran with (before any switch).
  const EngineSettings& s = done_ ? settings_ : candidates_[CandidateAt(position_)].settings;
  log_.V1("autotune: sample {} ({}) {}: {:.1f} MB/s over {:.3f} s", sample_, phase, s.Describe(),
          score, seconds);
  if (!csv_.is_open()) return;
  csv_ << fmt::format("{},{},{},{},{},{:.6f},{:.3f}\n", sample_, phase, s.fusion_threshold,
                      Milliseconds(s.cycle_time), AllReduceAlgorithmName(s.algorithm), seconds,
                      score);
  csv_.flush();
}

}  // namespace tandem::collective
