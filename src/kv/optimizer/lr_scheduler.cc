#include "kv/optimizer/lr_scheduler.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "kv/optimizer/optimizer_params.h"
#include "tandem/error.h"

namespace tandem::kv {
namespace {

// A schedule's factor multiplies the rate at each step: it may keep it (1)
// but never raise it or zero it.
const OptimizerParamReader::Range kFactorRange{0, 1, true, false};

constexpr std::string_view kPrefix = "lr_scheduler.";

std::string P(std::string_view name) { return std::string(kPrefix) + std::string(name); }

// base_lr * factor^k, dropping to stop_factor_lr and staying there.
class FactorScheduler final : public LrScheduler {
 public:
  FactorScheduler(Warmup w, int64_t step, double factor, double stop_factor_lr)
      : LrScheduler(w), step_(step), factor_(factor), stop_factor_lr_(stop_factor_lr) {}
  Kind kind() const override { return Kind::kFactor; }
  double Rate(int64_t num_update) override {
    if (num_update < warmup_.steps) return WarmupRate(num_update);
    while (num_update > count_ + step_) {
      count_ += step_;
      const double before = base_lr_;
      base_lr_ *= factor_;
      if (base_lr_ < stop_factor_lr_) base_lr_ = stop_factor_lr_;
      if (base_lr_ == before) {
        // A fixed point (factor 1, or clamped at stop_factor_lr): the rest
        // of MXNet's loop would only advance count, so do that at once.
        count_ += (num_update - count_ - 1) / step_ * step_;
      }
    }
    return base_lr_;
  }

 private:
  int64_t step_;
  double factor_;
  double stop_factor_lr_;
};

// base_lr * factor^(number of steps passed).
class MultiFactorScheduler final : public LrScheduler {
 public:
  MultiFactorScheduler(Warmup w, std::vector<int64_t> steps, double factor)
      : LrScheduler(w), steps_(std::move(steps)), factor_(factor) {}
  Kind kind() const override { return Kind::kMultiFactor; }
  double Rate(int64_t num_update) override {
    if (num_update < warmup_.steps) return WarmupRate(num_update);
    while (step_index_ < static_cast<int64_t>(steps_.size())) {
      if (num_update <= steps_[static_cast<size_t>(step_index_)]) return base_lr_;
      count_ = steps_[static_cast<size_t>(step_index_)];
      ++step_index_;
      base_lr_ *= factor_;
    }
    return base_lr_;
  }

 private:
  std::vector<int64_t> steps_;
  double factor_;
};

// final + (orig - final) * (1 - (n - warmup) / (max_update - warmup))^pwr.
class PolyScheduler final : public LrScheduler {
 public:
  PolyScheduler(Warmup w, double base_lr_orig, int64_t max_update, double power, double final_lr)
      : LrScheduler(w),
        base_lr_orig_(base_lr_orig),
        max_update_(max_update),
        power_(power),
        final_lr_(final_lr) {}
  Kind kind() const override { return Kind::kPoly; }
  double Rate(int64_t num_update) override {
    if (num_update < warmup_.steps) return WarmupRate(num_update);
    if (num_update <= max_update_) {
      const double max_steps = static_cast<double>(max_update_ - warmup_.steps);
      const double done = static_cast<double>(num_update - warmup_.steps);
      base_lr_ = final_lr_ + (base_lr_orig_ - final_lr_) * std::pow(1.0 - done / max_steps, power_);
    }
    return base_lr_;
  }

 private:
  double base_lr_orig_;
  int64_t max_update_;
  double power_;
  double final_lr_;
};

// final + (orig - final) * (1 + cos(pi * (n - warmup) / (max_update - warmup))) / 2.
class CosineScheduler final : public LrScheduler {
 public:
  CosineScheduler(Warmup w, double base_lr_orig, int64_t max_update, double final_lr)
      : LrScheduler(w), base_lr_orig_(base_lr_orig), max_update_(max_update), final_lr_(final_lr) {}
  Kind kind() const override { return Kind::kCosine; }
  double Rate(int64_t num_update) override {
    if (num_update < warmup_.steps) return WarmupRate(num_update);
    if (num_update <= max_update_) {
      const double max_steps = static_cast<double>(max_update_ - warmup_.steps);
      const double done = static_cast<double>(num_update - warmup_.steps);
      base_lr_ = final_lr_ + (base_lr_orig_ - final_lr_) *
                                 (1 + std::cos(std::numbers::pi * done / max_steps)) / 2;
    }
    return base_lr_;
  }

 private:
  double base_lr_orig_;
  int64_t max_update_;
  double final_lr_;
};

}  // namespace

double LrScheduler::WarmupRate(int64_t num_update) const {
  if (!warmup_.linear) return warmup_.begin_lr;
  const double increase = (warmup_.final_lr - warmup_.begin_lr) * static_cast<double>(num_update) /
                          static_cast<double>(warmup_.steps);
  return warmup_.begin_lr + increase;
}

void LrScheduler::SaveState(base::ByteWriter& out) const {
  out.Put(static_cast<uint8_t>(kind()));
  out.Put(std::bit_cast<uint64_t>(base_lr_));
  out.Put(count_);
  out.Put(step_index_);
}

void LrScheduler::LoadState(base::ByteReader& in) {
  const auto saved = in.Get<uint8_t>("lr_scheduler kind");
  const auto base_lr = std::bit_cast<double>(in.Get<uint64_t>("lr_scheduler base_lr"));
  const auto count = in.Get<int64_t>("lr_scheduler count");
  const auto step_index = in.Get<int64_t>("lr_scheduler step index");
  if (saved != static_cast<uint8_t>(kind())) {
    throw InvalidArgument(
        fmt::format("optimizer states: saved lr_scheduler kind {} differs from this optimizer's {}",
                    static_cast<unsigned>(saved), static_cast<unsigned>(kind())));
  }
  if (!std::isfinite(base_lr)) {
    throw InvalidArgument(
        fmt::format("optimizer states: lr_scheduler rate {} is not finite", base_lr));
  }
  if (count < 0 || step_index < 0) {
    throw InvalidArgument(fmt::format(
        "optimizer states: lr_scheduler counters are negative (count {}, step index {})", count,
        step_index));
  }
  base_lr_ = base_lr;
  count_ = count;
  step_index_ = step_index;
}

std::unique_ptr<LrScheduler> LrScheduler::Create(OptimizerParamReader& params,
                                                 double learning_rate) {
  const std::string name = params.GetString("lr_scheduler", "none");
  if (name == "none" || name.empty()) return nullptr;

  Warmup w;
  w.final_lr = params.GetDoubleIn(P("base_lr"), 0.01, OptimizerParamReader::kNonNegative);
  w.steps = params.GetInt(P("warmup_steps"), 0);
  w.begin_lr = params.GetDoubleIn(P("warmup_begin_lr"), 0, OptimizerParamReader::kNonNegative);
  const std::string mode = params.GetString(P("warmup_mode"), "linear");
  if (w.begin_lr > w.final_lr) {
    params.Fail(P("warmup_begin_lr"),
                fmt::format("is {}, above lr_scheduler.base_lr {}", w.begin_lr, w.final_lr));
  }
  if (w.steps < 0) params.Fail(P("warmup_steps"), fmt::format("is {}, must be >= 0", w.steps));
  if (mode != "linear" && mode != "constant") {
    params.Fail(P("warmup_mode"), fmt::format("is '{}', expected linear or constant", mode));
  }
  w.linear = mode == "linear";

  std::unique_ptr<LrScheduler> out;
  if (name == "factor") {
    const int64_t step = params.GetInt(P("step"), 0);
    const double factor = params.GetDoubleIn(P("factor"), 1.0, kFactorRange);
    const double stop =
        params.GetDoubleIn(P("stop_factor_lr"), 1e-8, OptimizerParamReader::kNonNegative);
    if (step < 1) params.Fail(P("step"), fmt::format("is {}, must be >= 1", step));
    out = std::make_unique<FactorScheduler>(w, step, factor, stop);
  } else if (name == "multifactor") {
    std::vector<int64_t> steps = params.GetIntList(P("step"));
    const double factor = params.GetDoubleIn(P("factor"), 1.0, kFactorRange);
    for (size_t i = 0; i < steps.size(); ++i) {
      if (steps[i] < 1)
        params.Fail(P("step"), fmt::format("has {}, every step must be >= 1", steps[i]));
      if (i > 0 && steps[i] <= steps[i - 1]) params.Fail(P("step"), "must be strictly increasing");
    }
    out = std::make_unique<MultiFactorScheduler>(w, std::move(steps), factor);
  } else if (name == "poly" || name == "cosine") {
    const int64_t max_update = params.GetInt(P("max_update"), 0);
    const double final_lr =
        params.GetDoubleIn(P("final_lr"), 0, OptimizerParamReader::kNonNegative);
    if (max_update < 1)
      params.Fail(P("max_update"), fmt::format("is {}, must be >= 1", max_update));
    if (max_update <= w.steps) {
      params.Fail(P("max_update"), fmt::format("is {}, must exceed lr_scheduler.warmup_steps {}",
                                               max_update, w.steps));
    }
    if (name == "poly") {
      // A negative power raises the rate towards infinity as the schedule ends.
      const double power = params.GetDoubleIn(P("pwr"), 2, OptimizerParamReader::kNonNegative);
      out = std::make_unique<PolyScheduler>(w, w.final_lr, max_update, power, final_lr);
    } else {
      out = std::make_unique<CosineScheduler>(w, w.final_lr, max_update, final_lr);
    }
  } else {
    params.Fail("lr_scheduler",
                fmt::format("is '{}', expected none, factor, multifactor, poly or cosine", name));
  }
  // MXNet's Optimizer.__init__: `self.lr_scheduler.base_lr = learning_rate`.
  out->base_lr_ = learning_rate;
  return out;
}

}  // namespace tandem::kv
