// The optimizers against MXNet 1.9's update rules, re-derived here from the
// formulas of python/mxnet/optimizer/optimizer.py and
// src/operator/optimizer_op-inl.h (docs/optimizers.md) as plain scalar code,
// independent of src/kv/optimizer's kernels. Parameterised over optimizer
// configurations, dtypes (float32, float64, float16 with and without a
// float32 master copy) and sizes (0, 1, odd, large); every step's weights
// must match bit for bit.
#include "kv/optimizer/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "base/dtype.h"
#include "tandem/error.h"

namespace tandem::kv {
namespace {

using base::Half;

// ---------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------

// Deterministic values in [-scale, scale), exactly representable in half.
std::vector<float> Values(size_t n, uint32_t seed, float scale) {
  std::vector<float> out(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& v : out) {
    x = x * 1664525u + 1013904223u;
    const float unit = static_cast<float>(x >> 8) / static_cast<float>(1u << 24);  // [0, 1)
    v = base::HalfToFloat(base::FloatToHalf((unit * 2 - 1) * scale));
  }
  return out;
}

float P(const OptimizerParams& p, const std::string& name, double fallback) {
  auto it = p.find(name);
  return static_cast<float>(it == p.end() ? fallback : std::stod(it->second));
}
double PD(const OptimizerParams& p, const std::string& name, double fallback) {
  auto it = p.find(name);
  return it == p.end() ? fallback : std::stod(it->second);
}
bool Has(const OptimizerParams& p, const std::string& name) { return p.count(name) != 0; }

// ---------------------------------------------------------------------------
// The reference: MXNet's formulas, one scalar step at a time. C is the
// arithmetic type; `rs` rounds a stored state and `rw` a stored weight (the
// identity except for float16 storage).
// ---------------------------------------------------------------------------

template <typename C>
struct Reference {
  std::string name;
  OptimizerParams p;
  std::vector<C> w, s0, s1, s2;
  int64_t t = 0;
  std::function<C(C)> rs = [](C v) { return v; };
  std::function<C(C)> rw = [](C v) { return v; };

  C F(const std::string& n, double fallback) const { return static_cast<C>(P(p, n, fallback)); }
  static C Clip(C x, C b) { return x > b ? b : (x < -b ? -b : x); }
  bool KernelClip() const { return Has(p, "clip_gradient") && PD(p, "clip_gradient", 0) > 0; }

  void Step(const std::vector<C>& g) {
    ++t;
    const size_t n = w.size();
    const double lr_d = PD(p, "learning_rate", name == "adam" || name == "rmsprop" ? 0.001 : 0.01);
    const C lr = static_cast<C>(static_cast<float>(lr_d));
    const C wd = F("wd", 0), rescale = F("rescale_grad", 1), clip = F("clip_gradient", -1);
    if (name == "sgd") {
      const C mom = F("momentum", 0);
      s0.resize(n);
      for (size_t i = 0; i < n; ++i) {
        C m = mom != 0 ? s0[i] : C(0);
        const C gg = KernelClip() ? Clip(rescale * g[i], clip) : rescale * g[i];
        // multi_sgd_mom_update: mom = momentum*mom - lr*wd*w - lr*g'
        m = (mom * m - (lr * wd) * w[i]) - (KernelClip() ? lr * gg : (lr * rescale) * g[i]);
        s0[i] = rs(m);
        w[i] = rw(w[i] + m);
      }
    } else if (name == "nag") {
      const C mom = F("momentum", 0);
      s0.resize(n);
      for (size_t i = 0; i < n; ++i) {
        const C gg = KernelClip() ? Clip(rescale * g[i], clip) : rescale * g[i];
        if (mom == 0) {  // sgd_update
          w[i] = rw((C(1) - lr * wd) * w[i] - (KernelClip() ? lr * gg : (lr * rescale) * g[i]));
          continue;
        }
        s0[i] = rs(mom * s0[i]);
        w[i] = rw((w[i] - s0[i]) + (mom + 1) * (s0[i] - lr * (gg + wd * w[i])));
        s0[i] = rs(s0[i] - lr * (gg + wd * w[i]));  // reads the updated weight, as MXNet
      }
    } else if (name == "adam") {
      const double b1 = PD(p, "beta1", 0.9), b2 = PD(p, "beta2", 0.999);
      const double coef1 = 1. - std::pow(b1, static_cast<double>(t));
      const double coef2 = 1. - std::pow(b2, static_cast<double>(t));
      const C lr_t = static_cast<C>(static_cast<float>(lr_d * (std::sqrt(coef2) / coef1)));
      const C beta1 = F("beta1", 0.9), beta2 = F("beta2", 0.999), eps = F("epsilon", 1e-8);
      s0.resize(n);
      s1.resize(n);
      for (size_t i = 0; i < n; ++i) {
        C gr = g[i] * rescale + w[i] * wd;
        if (KernelClip()) gr = Clip(gr, clip);
        s0[i] = rs(beta1 * s0[i] + (C(1) - beta1) * gr);
        s1[i] = rs(beta2 * s1[i] + ((C(1) - beta2) * gr) * gr);
        w[i] = rw(w[i] - (lr_t * s0[i]) / (std::sqrt(s1[i]) + eps));
      }
    } else if (name == "adagrad") {
      // Python NDArray ops with scalars converted from double.
      const C rescale_d = static_cast<C>(PD(p, "rescale_grad", 1));
      const C wd_d = static_cast<C>(PD(p, "wd", 0));
      const C eps = static_cast<C>(PD(p, "eps", 1e-7));
      const C minus_lr = static_cast<C>(-lr_d);
      s0.resize(n);
      for (size_t i = 0; i < n; ++i) {
        C gr = g[i] * rescale_d;
        if (Has(p, "clip_gradient")) {
          const C c = static_cast<C>(P(p, "clip_gradient", 0));
          gr = gr > c ? c : (gr < -c ? -c : gr);
        }
        s0[i] = rs(s0[i] + gr * gr);
        const C div = gr / std::sqrt(s0[i] + eps);
        w[i] = rw(w[i] + (div + w[i] * wd_d) * minus_lr);
      }
    } else if (name == "rmsprop") {
      const C g1 = F("gamma1", 0.9), g2 = F("gamma2", 0.9), eps = F("epsilon", 1e-8);
      const bool centered = Has(p, "centered") && p.at("centered") == "true";
      const bool clip_w = Has(p, "clip_weights") && PD(p, "clip_weights", 0) > 0;
      const C cw = F("clip_weights", -1);
      s0.resize(n);
      s1.resize(n);
      s2.resize(n);
      for (size_t i = 0; i < n; ++i) {
        C gr = rescale * g[i] + wd * w[i];
        if (KernelClip()) gr = Clip(gr, clip);
        C nw;
        if (!centered) {
          s0[i] = rs((C(1) - g1) * (gr * gr) + g1 * s0[i]);
          nw = w[i] - lr * (gr / std::sqrt(s0[i] + eps));
        } else {
          s0[i] = rs(((C(1) - g1) * gr) * gr + g1 * s0[i]);
          s1[i] = rs((C(1) - g1) * gr + g1 * s1[i]);
          s2[i] = rs(g2 * s2[i] - (lr * gr) / std::sqrt((s0[i] - s1[i] * s1[i]) + eps));
          nw = w[i] + s2[i];
        }
        if (clip_w) nw = Clip(nw, cw);
        w[i] = rw(nw);
      }
    }
  }
};

// ---------------------------------------------------------------------------
// The parameterised comparison.
// ---------------------------------------------------------------------------

struct OptCase {
  std::string label;
  std::string name;
  OptimizerParams params;
};

void PrintTo(const OptCase& c, std::ostream* os) { *os << c.label; }

enum class Mode { kF32, kF64, kF16, kF16Master };

std::vector<OptCase> Cases() {
  return {
      {"sgd_plain", "sgd", {{"learning_rate", "0.1"}}},
      {"sgd_momentum_wd",
       "sgd",
       {{"learning_rate", "0.1"}, {"momentum", "0.9"}, {"wd", "0.01"}, {"rescale_grad", "0.5"}}},
      {"sgd_clip",
       "sgd",
       {{"learning_rate", "0.05"}, {"momentum", "0.5"}, {"clip_gradient", "0.3"}}},
      {"nag_momentum_wd", "nag", {{"learning_rate", "0.1"}, {"momentum", "0.9"}, {"wd", "0.01"}}},
      {"nag_plain_clip",
       "nag",
       {{"learning_rate", "0.1"}, {"clip_gradient", "0.25"}, {"wd", "0.1"}}},
      {"adam_default", "adam", {}},
      {"adam_wd_clip",
       "adam",
       {{"learning_rate", "0.01"}, {"wd", "0.001"}, {"clip_gradient", "0.4"}, {"beta1", "0.8"}}},
      {"adagrad_default", "adagrad", {}},
      {"adagrad_clip_wd",
       "adagrad",
       {{"learning_rate", "0.1"}, {"clip_gradient", "0.5"}, {"wd", "0.01"}, {"eps", "1e-6"}}},
      {"rmsprop_default", "rmsprop", {}},
      {"rmsprop_centered",
       "rmsprop",
       {{"centered", "true"}, {"clip_weights", "0.9"}, {"wd", "0.01"}, {"learning_rate", "0.01"}}},
      {"rmsprop_clip", "rmsprop", {{"clip_gradient", "0.2"}, {"rescale_grad", "2"}}},
  };
}

using Param = std::tuple<OptCase, Mode, size_t>;

class OptimizerMatchesMxnet : public ::testing::TestWithParam<Param> {};

template <typename C, typename T>
void RunComparison(const OptCase& c, Mode mode, size_t n) {
  OptimizerParams params = c.params;
  if (mode == Mode::kF16Master) params["multi_precision"] = "true";
  auto opt = Optimizer::Create(c.name, params);
  Reference<C> ref{c.name, c.params};
  const bool half = mode == Mode::kF16 || mode == Mode::kF16Master;
  const auto to_half = [](C v) {
    return base::HalfToFloat(base::FloatToHalf(static_cast<float>(v)));
  };
  if (mode == Mode::kF16) {
    ref.rs = to_half;
    ref.rw = to_half;
  }
  const auto w0 = Values(n, 1, 1.0f);
  ref.w.assign(w0.begin(), w0.end());
  std::vector<T> weight(n);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, Half>) {
      weight[i] = base::FloatToHalf(w0[i]);
    } else {
      weight[i] = static_cast<T>(w0[i]);
    }
  }
  const DType dtype = base::DTypeOf<T>();
  for (int step = 0; step < 3; ++step) {
    const auto g0 = Values(n, 100 + static_cast<uint32_t>(step), 2.0f);
    std::vector<T> grad(n);
    for (size_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, Half>) {
        grad[i] = base::FloatToHalf(g0[i]);
      } else {
        grad[i] = static_cast<T>(g0[i]);
      }
    }
    opt->Update(7, TensorView{weight.data(), dtype, {static_cast<int64_t>(n)}},
                TensorView{grad.data(), dtype, {static_cast<int64_t>(n)}});
    ref.Step(std::vector<C>(g0.begin(), g0.end()));
    for (size_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, Half>) {
        const uint16_t want = base::FloatToHalf(static_cast<float>(ref.w[i])).bits;
        ASSERT_EQ(weight[i].bits, want) << c.label << " step " << step << " element " << i;
      } else {
        using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
        ASSERT_EQ(std::bit_cast<Bits>(weight[i]), std::bit_cast<Bits>(static_cast<T>(ref.w[i])))
            << c.label << " step " << step << " element " << i << ": got " << weight[i]
            << ", MXNet's rule gives " << ref.w[i];
      }
    }
    (void)half;
  }
}

TEST_P(OptimizerMatchesMxnet, ThreeStepsBitExact) {
  const auto& [c, mode, n] = GetParam();
  switch (mode) {
    case Mode::kF32:
      RunComparison<float, float>(c, mode, n);
      break;
    case Mode::kF64:
      RunComparison<double, double>(c, mode, n);
      break;
    case Mode::kF16:
    case Mode::kF16Master:
      RunComparison<float, Half>(c, mode, n);
      break;
  }
}

std::string ModeName(Mode m) {
  switch (m) {
    case Mode::kF32:
      return "f32";
    case Mode::kF64:
      return "f64";
    case Mode::kF16:
      return "f16";
    case Mode::kF16Master:
      return "f16mp";
  }
  return "?";
}

INSTANTIATE_TEST_SUITE_P(
    All, OptimizerMatchesMxnet,
    ::testing::Combine(::testing::ValuesIn(Cases()),
                       ::testing::Values(Mode::kF32, Mode::kF64, Mode::kF16, Mode::kF16Master),
                       ::testing::Values(size_t{0}, size_t{1}, size_t{7}, size_t{4099})),
    [](const ::testing::TestParamInfo<Param>& param_info) {
      return std::get<0>(param_info.param).label + "_" + ModeName(std::get<1>(param_info.param)) +
             "_n" + std::to_string(std::get<2>(param_info.param));
    });

// ---------------------------------------------------------------------------
// Hand-checked constants (every value exactly representable).
// ---------------------------------------------------------------------------

std::vector<float> RunSteps(const std::string& name, const OptimizerParams& params, float w0,
                            const std::vector<float>& grads) {
  auto opt = Optimizer::Create(name, params);
  float w = w0;
  std::vector<float> out;
  for (float g : grads) {
    float gg = g;
    opt->Update(1, TensorView{&w, DType::kF32, {1}}, TensorView{&gg, DType::kF32, {1}});
    out.push_back(w);
  }
  return out;
}

TEST(OptimizerHandChecked, SgdMomentum) {
  // m = 0.5 m - 0.5 g; w += m: m = -0.5, -0.75, -0.875.
  EXPECT_EQ(RunSteps("sgd", {{"learning_rate", "0.5"}, {"momentum", "0.5"}}, 1, {1, 1, 1}),
            (std::vector<float>{0.5f, -0.25f, -1.125f}));
}

TEST(OptimizerHandChecked, SgdWeightDecayAndRescale) {
  // m = -lr*wd*w - lr*rescale*g = -0.5*0.5*2 - 0.5*0.25*4 = -1; w = 1.
  EXPECT_EQ(
      RunSteps("sgd", {{"learning_rate", "0.5"}, {"wd", "0.5"}, {"rescale_grad", "0.25"}}, 2, {4}),
      (std::vector<float>{1.0f}));
}

TEST(OptimizerHandChecked, SgdClipsAfterRescale) {
  // clip(2 * 3, 1) = 1: w = 1 - 0.5 = 0.5.
  EXPECT_EQ(
      RunSteps("sgd", {{"learning_rate", "0.5"}, {"rescale_grad", "2"}, {"clip_gradient", "1"}}, 1,
               {3}),
      (std::vector<float>{0.5f}));
}

TEST(OptimizerHandChecked, NagMomentum) {
  // Step 1: m = 0; w = 1 - 0 + 1.5 * (0 - 0.5) = 0.25; m = -0.5.
  // Step 2: m = -0.25; w = 0.25 + 0.25 + 1.5 * (-0.25 - 0.5) = -0.625.
  EXPECT_EQ(RunSteps("nag", {{"learning_rate", "0.5"}, {"momentum", "0.5"}}, 1, {1, 1}),
            (std::vector<float>{0.25f, -0.625f}));
}

TEST(OptimizerHandChecked, AdamFirstStep) {
  // lr_t = 0.25 * sqrt(1 - 0.75) / (1 - 0.5) = 0.25; m = 0.5, v = 0.25;
  // w = 1 - 0.25 * 0.5 / 0.5 = 0.75.
  EXPECT_EQ(
      RunSteps("adam",
               {{"learning_rate", "0.25"}, {"beta1", "0.5"}, {"beta2", "0.75"}, {"epsilon", "0"}},
               1, {1}),
      (std::vector<float>{0.75f}));
}

TEST(OptimizerHandChecked, AdaGrad) {
  // h = 9, div = 3 / 3 = 1, w = 1 - 0.5; then g = 0 leaves w.
  EXPECT_EQ(RunSteps("adagrad", {{"learning_rate", "0.5"}, {"eps", "0"}}, 1, {3, 0}),
            (std::vector<float>{0.5f, 0.5f}));
}

TEST(OptimizerHandChecked, AdaGradClipZeroZeroesTheGradient) {
  EXPECT_EQ(
      RunSteps("adagrad", {{"learning_rate", "0.5"}, {"clip_gradient", "0"}, {"eps", "1"}}, 1, {3}),
      (std::vector<float>{1.0f}));
}

TEST(OptimizerHandChecked, RmsProp) {
  // n = 0.25 * 4 = 1; w = 3 - 0.5 * 2 / 1 = 2.
  EXPECT_EQ(
      RunSteps("rmsprop", {{"learning_rate", "0.5"}, {"gamma1", "0.75"}, {"epsilon", "0"}}, 3, {2}),
      (std::vector<float>{2.0f}));
}

TEST(OptimizerHandChecked, RmsPropCenteredAndClipWeights) {
  // n = 0.5 * 4 = 2, gbar = 1, delta = -0.5 * 2 / sqrt(2 - 1) = -1; w = 3 - 1 = 2, clipped to 1.5.
  EXPECT_EQ(RunSteps("rmsprop",
                     {{"learning_rate", "0.5"},
                      {"gamma1", "0.5"},
                      {"epsilon", "0"},
                      {"centered", "true"},
                      {"clip_weights", "1.5"}},
                     3, {2}),
            (std::vector<float>{1.5f}));
}

TEST(OptimizerHandChecked, MultiPrecisionKeepsTheSmallSteps) {
  // 2048 + 0.5 is not a float16 (spacing 2 there): without a master copy the
  // weight never moves; with one, four steps of -0.5 add up to 2046.
  auto run = [](bool mp) {
    auto opt = Optimizer::Create(
        "sgd", {{"learning_rate", "0.5"}, {"multi_precision", mp ? "true" : "false"}});
    Half w = base::FloatToHalf(2048);
    for (int i = 0; i < 4; ++i) {
      Half g = base::FloatToHalf(1);
      opt->Update(3, TensorView{&w, DType::kF16, {1}}, TensorView{&g, DType::kF16, {1}});
    }
    return base::HalfToFloat(w);
  };
  EXPECT_EQ(run(false), 2048.0f);
  EXPECT_EQ(run(true), 2046.0f);
}

// ---------------------------------------------------------------------------
// Update counts and the learning-rate schedule inside the optimizer.
// ---------------------------------------------------------------------------

TEST(OptimizerSchedule, FactorScheduleFollowsTheLargestUpdateCount) {
  // lr = 1 for num_update <= 2, 0.5 for 3..4, 0.25 after. Plain SGD with
  // g = 1 moves w by -lr. num_update is the maximum over keys, so key 2's
  // first update (count 1) runs at num_update 3's rate.
  auto opt = Optimizer::Create("sgd", {{"learning_rate", "1"},
                                       {"lr_scheduler", "factor"},
                                       {"lr_scheduler.step", "2"},
                                       {"lr_scheduler.factor", "0.5"}});
  float w1 = 0, w2 = 0, g = 1;
  const auto update = [&](uint64_t key, float* w) {
    opt->Update(key, TensorView{w, DType::kF32, {1}}, TensorView{&g, DType::kF32, {1}});
  };
  update(1, &w1);  // num_update 1: lr 1
  update(1, &w1);  // 2: lr 1
  update(1, &w1);  // 3: lr 0.5
  EXPECT_EQ(w1, -2.5f);
  update(2, &w2);  // key 2 count 1, num_update stays 3: lr 0.5
  EXPECT_EQ(w2, -0.5f);
  update(1, &w1);  // 4: 0.5
  update(1, &w1);  // 5: 0.25
  EXPECT_EQ(w1, -3.25f);
}

TEST(OptimizerSchedule, BeginNumUpdateOffsetsAdamsBiasCorrection) {
  // With begin_num_update = 1 the first update uses t = 2.
  const OptimizerParams base = {{"learning_rate", "0.1"}};
  OptimizerParams shifted = base;
  shifted["begin_num_update"] = "1";
  auto a = Optimizer::Create("adam", base);
  auto b = Optimizer::Create("adam", shifted);
  float wa = 1, wb = 1, g = 0.5f;
  a->Update(0, TensorView{&wa, DType::kF32, {1}}, TensorView{&g, DType::kF32, {1}});
  b->Update(0, TensorView{&wb, DType::kF32, {1}}, TensorView{&g, DType::kF32, {1}});
  const double lr_t2 = 0.1 * std::sqrt(1 - std::pow(0.999, 2.0)) / (1 - std::pow(0.9, 2.0));
  const float m = 0.1f * 0.5f;  // (1 - 0.9f) * 0.5
  const float v = (1.0f - 0.999f) * 0.5f * 0.5f;
  EXPECT_EQ(wb, 1.0f - static_cast<float>(lr_t2) * m / (std::sqrt(v) + 1e-8f));
  EXPECT_NE(wa, wb);
}

// ---------------------------------------------------------------------------
// Bad input: named errors, nothing changed.
// ---------------------------------------------------------------------------

template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(OptimizerErrors, UnknownParameterIsNamedWithTheAcceptedOnes) {
  const std::string msg = ErrorOf([] { Optimizer::Create("sgd", {{"momentun", "0.9"}}); });
  EXPECT_NE(msg.find("'momentun'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("momentum"), std::string::npos) << msg;
  EXPECT_NE(msg.find("learning_rate"), std::string::npos) << msg;
}

TEST(OptimizerErrors, UnknownOptimizerAndBadValues) {
  EXPECT_NE(ErrorOf([] { Optimizer::Create("adadelta", {}); }).find("'adadelta'"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] {
              Optimizer::Create("adam", {{"beta1", "x"}});
            }).find("'beta1'"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] {
              Optimizer::Create("adam", {{"beta2", "1"}});
            }).find("'beta2'"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] {
              Optimizer::Create("sgd", {{"momentum", "-0.1"}});
            }).find("momentum"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] {
              Optimizer::Create("rmsprop", {{"centered", "maybe"}});
            }).find("centered"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] {
              Optimizer::Create("sgd", {{"learning_rate", "nan"}});
            }).find("learning_rate"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] {
              Optimizer::Create("sgd", {{"lr_scheduler", "step"}});
            }).find("lr_scheduler"),
            std::string::npos);
}

// Values that cannot train are refused with the optimizer, the parameter,
// the value and the valid range (docs/optimizers.md, "Ranges"): one row per
// ranged parameter, with the other parameters it needs to be read at all.
struct OutOfRange {
  std::string optimizer;
  std::string param;
  std::string value;
  std::string message;      // the whole error
  OptimizerParams context;  // e.g. the schedule a schedule parameter belongs to
};

void PrintTo(const OutOfRange& c, std::ostream* os) {
  *os << c.optimizer << " " << c.param << "=" << c.value;
}

class OptimizerRanges : public ::testing::TestWithParam<OutOfRange> {};

TEST_P(OptimizerRanges, RefuseTheValueNamingTheRange) {
  const OutOfRange& c = GetParam();
  OptimizerParams params = c.context;
  params[c.param] = c.value;
  EXPECT_EQ(ErrorOf([&] { Optimizer::Create(c.optimizer, params); }), c.message);
}

const OptimizerParams kFactorSchedule{{"lr_scheduler", "factor"}, {"lr_scheduler.step", "2"}};
const OptimizerParams kPolySchedule{{"lr_scheduler", "poly"}, {"lr_scheduler.max_update", "10"}};
constexpr const char* kNonNegative = "must be in [0, 3.4028235e+38]";

// "optimizer '<optimizer>': parameter '<param>' <what>".
std::string Refusal(const std::string& optimizer, const std::string& param,
                    const std::string& what) {
  return "optimizer '" + optimizer + "': parameter '" + param + "' " + what;
}

OutOfRange Row(std::string optimizer, std::string param, std::string value, std::string what,
               OptimizerParams context = {}) {
  std::string message = Refusal(optimizer, param, what);
  return OutOfRange{std::move(optimizer), std::move(param), std::move(value), std::move(message),
                    std::move(context)};
}

INSTANTIATE_TEST_SUITE_P(
    All, OptimizerRanges,
    ::testing::Values(
        Row("sgd", "learning_rate", "-1", std::string("is -1, ") + kNonNegative),
        Row("sgd", "learning_rate", "1e39",
            "is 1e+39, beyond float32's range (the update kernels compute in float32)"),
        Row("sgd", "learning_rate", "inf", "is 'inf', expected a finite number"),
        Row("adam", "learning_rate", "nan", "is 'nan', expected a finite number"),
        Row("sgd", "momentum", "5", "is 5, must be in [0, 1)"),
        Row("sgd", "momentum", "-0.1", "is -0.1, must be in [0, 1)"),
        Row("nag", "momentum", "1", "is 1, must be in [0, 1)"),
        Row("sgd", "wd", "-1", std::string("is -1, ") + kNonNegative),
        Row("rmsprop", "wd", "1e39",
            "is 1e+39, beyond float32's range (the update kernels compute in float32)"),
        Row("sgd", "rescale_grad", "0", "is 0, must be in (0, 3.4028235e+38]"),
        Row("adam", "rescale_grad", "-0.5", "is -0.5, must be in (0, 3.4028235e+38]"),
        Row("sgd", "clip_gradient", "inf", "is 'inf', expected a finite number"),
        Row("rmsprop", "clip_weights", "-inf", "is '-inf', expected a finite number"),
        Row("adam", "beta1", "1", "is 1, must be in [0, 1)"),
        Row("adam", "beta2", "-0.1", "is -0.1, must be in [0, 1)"),
        Row("adam", "epsilon", "-1e-8", std::string("is -1e-08, ") + kNonNegative),
        Row("adagrad", "eps", "-1", std::string("is -1, ") + kNonNegative),
        Row("rmsprop", "gamma1", "1.5", "is 1.5, must be in [0, 1)"),
        Row("rmsprop", "gamma2", "-0.5", "is -0.5, must be in [0, 1)"),
        Row("rmsprop", "epsilon", "-1", std::string("is -1, ") + kNonNegative),
        Row("sgd", "lr_scheduler.factor", "0", "is 0, must be in (0, 1]", kFactorSchedule),
        Row("sgd", "lr_scheduler.factor", "1.5", "is 1.5, must be in (0, 1]", kFactorSchedule),
        Row("sgd", "lr_scheduler.step", "0", "is 0, must be >= 1", {{"lr_scheduler", "factor"}}),
        Row("sgd", "lr_scheduler.stop_factor_lr", "-1", std::string("is -1, ") + kNonNegative,
            kFactorSchedule),
        Row("nag", "lr_scheduler.base_lr", "-0.1", std::string("is -0.1, ") + kNonNegative,
            kFactorSchedule),
        Row("sgd", "lr_scheduler.warmup_steps", "-1", "is -1, must be >= 0", kFactorSchedule),
        Row("adam", "lr_scheduler.factor", "2", "is 2, must be in (0, 1]",
            {{"lr_scheduler", "multifactor"}, {"lr_scheduler.step", "3,6"}}),
        Row("sgd", "lr_scheduler.pwr", "-1", std::string("is -1, ") + kNonNegative, kPolySchedule),
        Row("sgd", "lr_scheduler.final_lr", "-1", std::string("is -1, ") + kNonNegative,
            kPolySchedule),
        Row("sgd", "lr_scheduler.max_update", "0", "is 0, must be >= 1",
            {{"lr_scheduler", "cosine"}}),
        Row("sgd", "begin_num_update", "-1", "is -1, must be in [0, 2^62]")),
    [](const ::testing::TestParamInfo<OutOfRange>& row) {
      std::string name =
          row.param.optimizer + "_" + row.param.param + "_" + std::to_string(row.index);
      std::replace(name.begin(), name.end(), '.', '_');
      return name;
    });

TEST(OptimizerRanges, TheEndsOfEachRangeAreAccepted) {
  EXPECT_NO_THROW(Optimizer::Create("sgd", {{"momentum", "0"}, {"learning_rate", "0"}}));
  EXPECT_NO_THROW(Optimizer::Create("sgd", {{"momentum", "0.999"}, {"wd", "0"}}));
  EXPECT_NO_THROW(Optimizer::Create("adam", {{"epsilon", "0"}, {"rescale_grad", "1e-30"}}));
  EXPECT_NO_THROW(Optimizer::Create("sgd", {{"clip_gradient", "-1"}}));  // MXNet: no clipping
  EXPECT_NO_THROW(Optimizer::Create("sgd", {{"rescale_grad", "3.4e38"}, {"wd", "3.4e38"}}));
  EXPECT_NO_THROW(Optimizer::Create(
      "sgd",
      {{"lr_scheduler", "factor"}, {"lr_scheduler.step", "1"}, {"lr_scheduler.factor", "1"}}));
  EXPECT_NO_THROW(Optimizer::Create(
      "sgd",
      {{"lr_scheduler", "poly"}, {"lr_scheduler.max_update", "5"}, {"lr_scheduler.pwr", "0"}}));
}

TEST(OptimizerErrors, NamesAreCaseInsensitiveLikeMxnet) {
  EXPECT_EQ(Optimizer::Create("SGD", {})->name(), "sgd");
  EXPECT_EQ(Optimizer::Create("RMSProp", {})->name(), "rmsprop");
}

TEST(OptimizerErrors, MismatchesNameTheKeyAndLeaveEverythingUnchanged) {
  auto opt = Optimizer::Create("sgd", {{"learning_rate", "0.5"}, {"momentum", "0.5"}});
  std::vector<float> w = {1, 2, 3};
  std::vector<float> g = {1, 1, 1};
  std::vector<double> gd = {1, 1, 1};
  opt->Update(42, TensorView{w.data(), DType::kF32, {3}}, TensorView{g.data(), DType::kF32, {3}});
  const std::vector<float> after_one = w;

  std::string msg = ErrorOf([&] {
    opt->Update(42, TensorView{w.data(), DType::kF32, {3}},
                TensorView{gd.data(), DType::kF64, {3}});
  });
  EXPECT_NE(msg.find("key 42"), std::string::npos) << msg;
  msg = ErrorOf([&] {
    opt->Update(42, TensorView{w.data(), DType::kF32, {3}}, TensorView{g.data(), DType::kF32, {2}});
  });
  EXPECT_NE(msg.find("key 42"), std::string::npos) << msg;
  msg = ErrorOf([&] {
    opt->Update(42, TensorView{w.data(), DType::kF32, {2}}, TensorView{g.data(), DType::kF32, {2}});
  });
  EXPECT_NE(msg.find("float32[3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("float32[2]"), std::string::npos) << msg;
  std::vector<int32_t> wi = {1, 2, 3}, gi = {1, 1, 1};
  msg = ErrorOf([&] {
    opt->Update(43, TensorView{wi.data(), DType::kI32, {3}},
                TensorView{gi.data(), DType::kI32, {3}});
  });
  EXPECT_NE(msg.find("int32"), std::string::npos) << msg;
  EXPECT_EQ(w, after_one);

  // The momentum survived the failures: the next step is the second step.
  opt->Update(42, TensorView{w.data(), DType::kF32, {3}}, TensorView{g.data(), DType::kF32, {3}});
  EXPECT_EQ(w, (std::vector<float>{-0.25f, 0.75f, 1.75f}));
}

// ---------------------------------------------------------------------------
// Concurrency: updates of different keys from several threads give what a
// sequential run gives.
// ---------------------------------------------------------------------------

TEST(OptimizerConcurrency, DifferentKeysInParallelEqualSequential) {
  constexpr int kKeys = 16, kSteps = 20;
  constexpr size_t kN = 513;
  const OptimizerParams params = {{"learning_rate", "0.01"}, {"wd", "0.001"}};
  auto run = [&](bool parallel) {
    auto opt = Optimizer::Create("adam", params);
    std::vector<std::vector<float>> w(kKeys, Values(kN, 5, 1.0f));
    auto worker = [&](int first, int stride) {
      for (int step = 0; step < kSteps; ++step) {
        for (int k = first; k < kKeys; k += stride) {
          auto g = Values(kN, static_cast<uint32_t>(k * 100 + step), 1.0f);
          opt->Update(static_cast<uint64_t>(k), TensorView{w[k].data(), DType::kF32, {kN}},
                      TensorView{g.data(), DType::kF32, {kN}});
        }
      }
    };
    if (parallel) {
      std::vector<std::thread> threads;
      for (int t = 0; t < 4; ++t) threads.emplace_back(worker, t, 4);
      for (auto& t : threads) t.join();
    } else {
      worker(0, 1);
    }
    return w;
  };
  // Adam's rate depends on the per-key count only (no schedule), so the
  // interleaving cannot change the result.
  EXPECT_EQ(run(true), run(false));
}

}  // namespace
}  // namespace tandem::kv

namespace tandem::kv {
namespace {

// ---------------------------------------------------------------------------
// Row-sparse gradients (UpdateRows).
// ---------------------------------------------------------------------------

// A 5 x 3 float32 weight of ones; rows get gradient 1.
struct RowsFixture {
  std::vector<float> w = std::vector<float>(15, 1.0f);
  void Rows(Optimizer& opt, std::vector<int64_t> rows, float g = 1.0f) {
    std::vector<float> grad(rows.size() * 3, g);
    opt.UpdateRows(0, TensorView{w.data(), DType::kF32, {5, 3}}, rows,
                   TensorView{grad.data(), DType::kF32, {static_cast<int64_t>(rows.size()), 3}});
  }
  std::vector<float> Column0() const { return {w[0], w[3], w[6], w[9], w[12]}; }
};

TEST(OptimizerRows, SgdLazyTouchesOnlyItsRowsAndTheirMomentum) {
  // lr 0.5, momentum 0.5, g 1: a row's first update gives 0.5, its second
  // -0.25. Row 3 is not in the second push: lazily it keeps 0.5 (its
  // momentum is not decayed either).
  auto opt = Optimizer::Create("sgd", {{"learning_rate", "0.5"}, {"momentum", "0.5"}});
  RowsFixture f;
  f.Rows(*opt, {1, 3});
  EXPECT_EQ(f.Column0(), (std::vector<float>{1, 0.5f, 1, 0.5f, 1}));
  f.Rows(*opt, {0, 1});
  EXPECT_EQ(f.Column0(), (std::vector<float>{0.5f, -0.25f, 1, 0.5f, 1}));
}

TEST(OptimizerRows, SgdStandardUpdateMovesEveryRow) {
  // lazy_update=false: the push is a dense gradient with zero rows, so row
  // 3's momentum (-0.5, halved to -0.25) still moves it: 0.5 - 0.25.
  auto opt = Optimizer::Create(
      "sgd", {{"learning_rate", "0.5"}, {"momentum", "0.5"}, {"lazy_update", "false"}});
  RowsFixture f;
  f.Rows(*opt, {1, 3});
  f.Rows(*opt, {0, 1});
  EXPECT_EQ(f.Column0(), (std::vector<float>{0.5f, -0.25f, 1, 0.25f, 1}));
}

TEST(OptimizerRows, SgdLazyWithoutMomentumIsSgdUpdate) {
  // sgd_update: (1 - lr * wd) * w - (lr * rescale) * g = 0.75 * 1 - 0.5.
  auto opt = Optimizer::Create("sgd", {{"learning_rate", "0.5"}, {"wd", "0.5"}});
  RowsFixture f;
  f.Rows(*opt, {4});
  EXPECT_EQ(f.Column0(), (std::vector<float>{1, 1, 1, 1, 0.25f}));
}

TEST(OptimizerRows, AdaGradIsLazyAndRefusesWeightDecay) {
  // history 9, w = 1 - (3 / 3) * 0.5.
  auto opt = Optimizer::Create("adagrad", {{"learning_rate", "0.5"}, {"eps", "0"}});
  RowsFixture f;
  f.Rows(*opt, {2}, 3.0f);
  EXPECT_EQ(f.Column0(), (std::vector<float>{1, 1, 0.5f, 1, 1}));

  auto decayed = Optimizer::Create("adagrad", {{"wd", "0.1"}});
  RowsFixture g;
  try {
    g.Rows(*decayed, {2});
    ADD_FAILURE() << "accepted wd";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("wd"), std::string::npos) << e.what();
  }
  EXPECT_EQ(g.w, std::vector<float>(15, 1.0f));
  EXPECT_EQ(decayed->SaveStates(), Optimizer::Create("adagrad", {{"wd", "0.1"}})->SaveStates());
}

// Lazy rows pushed every step equal a dense update of just those rows (the
// same update count, the same rule); untouched rows never move.
struct LazyCase {
  std::string label;
  std::string name;
  OptimizerParams params;
  DType dtype;
};

void PrintTo(const LazyCase& c, std::ostream* os) { *os << c.label; }

class OptimizerLazyRows : public ::testing::TestWithParam<LazyCase> {};

TEST_P(OptimizerLazyRows, EqualDenseUpdateOfThoseRows) {
  const LazyCase& c = GetParam();
  const std::vector<int64_t> rows = {0, 2, 5};
  constexpr int64_t kRows = 7, kCols = 5;
  auto lazy = Optimizer::Create(c.name, c.params);
  auto dense = Optimizer::Create(c.name, c.params);
  const auto w0 = Values(kRows * kCols, 3, 1.0f);
  const size_t es = ElementSize(c.dtype);
  const auto put = [&](std::vector<std::byte>& buf, size_t i, float v) {
    if (c.dtype == DType::kF32) {
      std::memcpy(buf.data() + 4 * i, &v, 4);
    } else if (c.dtype == DType::kF64) {
      const double d = v;
      std::memcpy(buf.data() + 8 * i, &d, 8);
    } else {
      const Half h = base::FloatToHalf(v);
      std::memcpy(buf.data() + 2 * i, &h, 2);
    }
  };
  std::vector<std::byte> full(kRows * kCols * es), sub(rows.size() * kCols * es);
  for (int64_t i = 0; i < kRows * kCols; ++i) put(full, static_cast<size_t>(i), w0[i]);
  for (size_t r = 0; r < rows.size(); ++r) {
    std::memcpy(sub.data() + r * kCols * es, full.data() + rows[r] * kCols * es, kCols * es);
  }
  const std::vector<std::byte> original = full;
  for (int step = 0; step < 3; ++step) {
    const auto g = Values(rows.size() * kCols, 50 + static_cast<uint32_t>(step), 1.0f);
    std::vector<std::byte> grad(g.size() * es);
    for (size_t i = 0; i < g.size(); ++i) put(grad, i, g[i]);
    const std::vector<int64_t> gshape = {static_cast<int64_t>(rows.size()), kCols};
    lazy->UpdateRows(5, TensorView{full.data(), c.dtype, {kRows, kCols}}, rows,
                     TensorView{grad.data(), c.dtype, gshape});
    dense->Update(5, TensorView{sub.data(), c.dtype, gshape},
                  TensorView{grad.data(), c.dtype, gshape});
  }
  for (int64_t r = 0, k = 0; r < kRows; ++r) {
    const bool touched = k < static_cast<int64_t>(rows.size()) && rows[k] == r;
    const std::byte* got = full.data() + r * kCols * es;
    const std::byte* want =
        touched ? sub.data() + k * kCols * es : original.data() + r * kCols * es;
    EXPECT_EQ(std::memcmp(got, want, kCols * es), 0) << c.label << " row " << r;
    if (touched) ++k;
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, OptimizerLazyRows,
    ::testing::Values(LazyCase{"sgd_momentum_f32",
                               "sgd",
                               {{"momentum", "0.9"}, {"wd", "0.01"}, {"learning_rate", "0.1"}},
                               DType::kF32},
                      LazyCase{"sgd_momentum_clip_f64",
                               "sgd",
                               {{"momentum", "0.9"}, {"clip_gradient", "0.5"}},
                               DType::kF64},
                      LazyCase{"sgd_momentum_f16", "sgd", {{"momentum", "0.9"}}, DType::kF16},
                      LazyCase{"adam_f32", "adam", {{"wd", "0.01"}}, DType::kF32},
                      LazyCase{"adam_f64", "adam", {}, DType::kF64},
                      LazyCase{"adam_f16_mp", "adam", {{"multi_precision", "true"}}, DType::kF16}),
    [](const ::testing::TestParamInfo<LazyCase>& param_info) { return param_info.param.label; });

// Where MXNet has no lazy row update, a row-sparse push is exactly a dense
// push that is zero outside its rows.
class OptimizerDenseRows : public ::testing::TestWithParam<LazyCase> {};

TEST_P(OptimizerDenseRows, EqualDensePushWithZeroRows) {
  const LazyCase& c = GetParam();
  ASSERT_EQ(c.dtype, DType::kF32);
  const std::vector<int64_t> rows = {1, 4};
  auto by_rows = Optimizer::Create(c.name, c.params);
  auto by_dense = Optimizer::Create(c.name, c.params);
  std::vector<float> a = Values(6 * 4, 9, 1.0f), b = a;
  for (int step = 0; step < 3; ++step) {
    const auto g = Values(rows.size() * 4, 70 + static_cast<uint32_t>(step), 1.0f);
    std::vector<float> dense(6 * 4, 0.0f);
    for (size_t r = 0; r < rows.size(); ++r) {
      std::copy(g.begin() + static_cast<long>(r * 4), g.begin() + static_cast<long>(r * 4 + 4),
                dense.begin() + rows[r] * 4);
    }
    by_rows->UpdateRows(3, TensorView{a.data(), DType::kF32, {6, 4}}, rows,
                        TensorView{const_cast<float*>(g.data()), DType::kF32, {2, 4}});
    by_dense->Update(3, TensorView{b.data(), DType::kF32, {6, 4}},
                     TensorView{dense.data(), DType::kF32, {6, 4}});
    ASSERT_EQ(a, b) << c.label << " step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, OptimizerDenseRows,
    ::testing::Values(LazyCase{"sgd_standard",
                               "sgd",
                               {{"momentum", "0.9"}, {"wd", "0.1"}, {"lazy_update", "false"}},
                               DType::kF32},
                      LazyCase{"adam_standard", "adam", {{"lazy_update", "false"}}, DType::kF32},
                      LazyCase{"nag", "nag", {{"momentum", "0.9"}, {"wd", "0.1"}}, DType::kF32},
                      LazyCase{"rmsprop", "rmsprop", {{"centered", "true"}}, DType::kF32}),
    [](const ::testing::TestParamInfo<LazyCase>& param_info) { return param_info.param.label; });

TEST(OptimizerRows, SgdUnderMultiPrecisionIsDenseAsMxnetsMpKernels) {
  // mp_sgd_mom_update has no row-sparse form; MXNet densifies the gradient.
  const OptimizerParams p = {
      {"learning_rate", "0.5"}, {"momentum", "0.5"}, {"multi_precision", "true"}};
  auto by_rows = Optimizer::Create("sgd", p);
  auto by_dense = Optimizer::Create("sgd", p);
  const Half one = base::FloatToHalf(1), zero = base::FloatToHalf(0);
  std::vector<Half> a(4, one), b(4, one);
  std::vector<Half> rows_grad = {one, one};
  std::vector<Half> dense_grad = {zero, one, zero, one};
  for (const auto& push : {std::vector<int64_t>{1, 3}, std::vector<int64_t>{1, 3}}) {
    by_rows->UpdateRows(2, TensorView{a.data(), DType::kF16, {4}}, push,
                        TensorView{rows_grad.data(), DType::kF16, {2}});
    by_dense->Update(2, TensorView{b.data(), DType::kF16, {4}},
                     TensorView{dense_grad.data(), DType::kF16, {4}});
  }
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(a[i].bits, b[i].bits) << i;
  EXPECT_EQ(base::HalfToFloat(a[1]), -0.25f);
}

TEST(OptimizerRows, BadRowsAreRefusedNamingTheKey) {
  auto opt = Optimizer::Create("sgd", {{"momentum", "0.5"}});
  std::vector<float> w(12, 1.0f), g(6, 1.0f);
  const auto rows_error = [&](std::vector<int64_t> rows, std::vector<int64_t> gshape,
                              std::vector<int64_t> wshape = {4, 3}) -> std::string {
    try {
      opt->UpdateRows(8, TensorView{w.data(), DType::kF32, wshape}, rows,
                      TensorView{g.data(), DType::kF32, gshape});
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(rows_error({2, 1}, {2, 3}).find("strictly increasing"), std::string::npos);
  EXPECT_NE(rows_error({1, 1}, {2, 3}).find("strictly increasing"), std::string::npos);
  EXPECT_NE(rows_error({0, 4}, {2, 3}).find("outside"), std::string::npos);
  EXPECT_NE(rows_error({-1, 2}, {2, 3}).find("outside"), std::string::npos);
  EXPECT_NE(rows_error({0, 1}, {2, 2}).find("dimension 1"), std::string::npos);
  EXPECT_NE(rows_error({0}, {2, 3}).find("1 row ids for 2"), std::string::npos);
  EXPECT_NE(rows_error({0}, {1}, {}).find("scalar"), std::string::npos);
  EXPECT_NE(rows_error({0, 1}, {2, 3}, {12}).find("dimensions"), std::string::npos);
  EXPECT_EQ(w, std::vector<float>(12, 1.0f));
  EXPECT_NE(rows_error({0, 1}, {2, 3}).find(""), std::string::npos);  // a good push still works
  EXPECT_EQ(w[0], 0.99f);                                             // 1 - 0.01
}

}  // namespace
}  // namespace tandem::kv
