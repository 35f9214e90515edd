// Saved optimizer states (docs/optimizers.md, "Saved states"): a save and a
// load into a fresh optimizer give bit-identical subsequent updates, for
// every optimizer and precision, with an lr schedule's state too; every
// truncated, corrupted, foreign or mismatched blob is refused with
// InvalidArgument and the current state left exactly as it was.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "kv/optimizer/optimizer.h"
#include "net/crc32c.h"
#include "tandem/error.h"

namespace tandem::kv {
namespace {

struct Config {
  std::string label;
  std::string name;
  OptimizerParams params;
  DType dtype;
};

void PrintTo(const Config& c, std::ostream* os) { *os << c.label; }

// Weights and gradients of three keys with 0, 1 and 37 elements, in `dtype`.
struct Keys {
  DType dtype;
  std::vector<std::vector<std::byte>> weights;

  explicit Keys(DType d) : dtype(d) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{37}}) {
      std::vector<std::byte> w(n * ElementSize(d));
      for (size_t i = 0; i < n; ++i) Set(w, i, 0.25 * static_cast<double>(i % 7) - 0.5);
      weights.push_back(std::move(w));
    }
  }
  void Set(std::vector<std::byte>& buf, size_t i, double v) const {
    switch (dtype) {
      case DType::kF32: {
        float f = static_cast<float>(v);
        std::memcpy(buf.data() + 4 * i, &f, 4);
        break;
      }
      case DType::kF64:
        std::memcpy(buf.data() + 8 * i, &v, 8);
        break;
      default: {
        base::Half h = base::FloatToHalf(static_cast<float>(v));
        std::memcpy(buf.data() + 2 * i, &h, 2);
      }
    }
  }
  void Step(Optimizer& opt, int step) {
    for (size_t k = 0; k < weights.size(); ++k) {
      const size_t n = weights[k].size() / ElementSize(dtype);
      std::vector<std::byte> grad(weights[k].size());
      for (size_t i = 0; i < n; ++i)
        Set(grad, i, 0.125 * static_cast<double>((i + step) % 5) - 0.25);
      const std::vector<int64_t> shape = {static_cast<int64_t>(n)};
      opt.Update(k * 4 + 1, TensorView{weights[k].data(), dtype, shape},
                 TensorView{grad.data(), dtype, shape});
    }
  }
};

class StatesRoundTrip : public ::testing::TestWithParam<Config> {};

TEST_P(StatesRoundTrip, LoadedOptimizerContinuesIdentically) {
  const Config& c = GetParam();
  auto original = Optimizer::Create(c.name, c.params);
  Keys keys(c.dtype);
  keys.Step(*original, 0);
  keys.Step(*original, 1);
  const std::string saved = original->SaveStates();

  auto restored = Optimizer::Create(c.name, c.params);
  restored->LoadStates(saved);
  EXPECT_EQ(restored->SaveStates(), saved);

  Keys twin = keys;
  for (int step = 2; step < 6; ++step) {
    keys.Step(*original, step);
    twin.Step(*restored, step);
    ASSERT_EQ(keys.weights, twin.weights) << c.label << " step " << step;
  }
  EXPECT_EQ(original->SaveStates(), restored->SaveStates());
}

std::vector<Config> Configs() {
  const OptimizerParams schedule = {{"learning_rate", "0.5"},
                                    {"lr_scheduler", "multifactor"},
                                    {"lr_scheduler.step", "2,3,4"},
                                    {"lr_scheduler.factor", "0.5"}};
  std::vector<Config> out;
  for (auto [dtype, tag] : {std::pair{DType::kF32, "f32"}, std::pair{DType::kF64, "f64"},
                            std::pair{DType::kF16, "f16"}}) {
    for (bool mp : {false, true}) {
      if (mp && dtype != DType::kF16) continue;
      const std::string suffix = std::string(tag) + (mp ? "mp" : "");
      const auto with = [&](OptimizerParams p) {
        if (mp) p["multi_precision"] = "true";
        return p;
      };
      out.push_back({"sgd_momentum_schedule_" + suffix, "sgd", with([&] {
                       auto p = schedule;
                       p["momentum"] = "0.9";
                       return p;
                     }()),
                     dtype});
      out.push_back({"sgd_stateless_" + suffix, "sgd", with({{"learning_rate", "0.1"}}), dtype});
      out.push_back({"nag_" + suffix, "nag", with({{"momentum", "0.5"}, {"wd", "0.1"}}), dtype});
      out.push_back({"adam_" + suffix, "adam", with({{"learning_rate", "0.1"}}), dtype});
      out.push_back({"adagrad_" + suffix, "adagrad", with({}), dtype});
      out.push_back({"rmsprop_centered_" + suffix, "rmsprop", with({{"centered", "true"}}), dtype});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, StatesRoundTrip, ::testing::ValuesIn(Configs()),
                         [](const ::testing::TestParamInfo<Config>& param_info) {
                           return param_info.param.label;
                         });

// ---------------------------------------------------------------------------
// Refusals. Each leaves the target's state exactly as it was.
// ---------------------------------------------------------------------------

class StatesRefused : public ::testing::Test {
 protected:
  void SetUp() override {
    source_ = Optimizer::Create("adam", params_);
    Keys keys(DType::kF32);
    keys.Step(*source_, 0);
    blob_ = source_->SaveStates();
    target_ = Optimizer::Create("adam", params_);
    Keys other(DType::kF32);
    other.Step(*target_, 7);
    before_ = target_->SaveStates();
  }

  // Loading `bytes` into the target throws InvalidArgument whose message
  // contains `needle`, and changes nothing.
  void ExpectRefused(const std::string& bytes, const std::string& needle) {
    try {
      target_->LoadStates(bytes);
      ADD_FAILURE() << "accepted a bad blob (" << needle << ")";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(target_->SaveStates(), before_);
  }

  // `bytes` with a valid checksum recomputed over the body.
  static std::string Resealed(std::string bytes) {
    bytes.resize(bytes.size() - 4);
    const uint32_t crc = net::Crc32c(std::as_bytes(std::span(bytes.data(), bytes.size())));
    bytes.append(reinterpret_cast<const char*>(&crc), 4);
    return bytes;
  }

  OptimizerParams params_ = {{"learning_rate", "0.1"}};
  std::unique_ptr<Optimizer> source_, target_;
  std::string blob_, before_;
};

TEST_F(StatesRefused, EveryTruncation) {
  for (size_t len = 0; len < blob_.size(); ++len) {
    SCOPED_TRACE(len);
    ExpectRefused(blob_.substr(0, len), "cannot load states");
  }
}

TEST_F(StatesRefused, EverySingleByteCorruption) {
  for (size_t pos = 0; pos < blob_.size(); ++pos) {
    SCOPED_TRACE(pos);
    std::string bad = blob_;
    bad[pos] = static_cast<char>(bad[pos] ^ 0x5A);
    ExpectRefused(bad, "cannot load states");
  }
}

TEST_F(StatesRefused, TrailingBytes) {
  ExpectRefused(Resealed(blob_.substr(0, blob_.size() - 4) + "xxxx" + "crc!"), "trailing");
}

TEST_F(StatesRefused, ForeignBytes) {
  ExpectRefused("", "too short");
  ExpectRefused(std::string(64, '\0'), "magic");
  ExpectRefused("PK\x03\x04 this is a zip file, not optimizer states", "magic");
}

TEST_F(StatesRefused, AnotherOptimizersStates) {
  auto sgd = Optimizer::Create("sgd", {});
  ExpectRefused(sgd->SaveStates(), "'sgd'");
}

TEST_F(StatesRefused, NewerVersion) {
  std::string bad = blob_;
  bad[4] = 2;  // the u16 version after the u32 magic
  ExpectRefused(Resealed(bad), "version 2");
}

TEST_F(StatesRefused, MismatchedConfiguration) {
  // Same optimizer name, valid checksum, but a layout this one cannot use.
  auto no_momentum = Optimizer::Create("sgd", {});
  Keys keys(DType::kF32);
  keys.Step(*no_momentum, 0);
  auto momentum = Optimizer::Create("sgd", {{"momentum", "0.9"}});
  EXPECT_THROW(momentum->LoadStates(no_momentum->SaveStates()), InvalidArgument);

  auto plain = Optimizer::Create("adam", {});
  Keys halves(DType::kF16);
  halves.Step(*plain, 0);
  auto mp = Optimizer::Create("adam", {{"multi_precision", "true"}});
  try {
    mp->LoadStates(plain->SaveStates());
    ADD_FAILURE() << "accepted states without a master copy";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("master copy"), std::string::npos) << e.what();
  }

  auto scheduled =
      Optimizer::Create("adam", {{"lr_scheduler", "factor"}, {"lr_scheduler.step", "2"}});
  EXPECT_THROW(scheduled->LoadStates(blob_), InvalidArgument);
}

TEST_F(StatesRefused, HugeElementCountIsNotTrusted) {
  // Key records start after magic(4) version(2) name(4+4) num_update(8)
  // has_scheduler(1) key count(8); the element count sits after key(8)
  // dtype(1) master(1) state dtype(1) update count(8).
  const size_t elements_at = 4 + 2 + 4 + 4 + 8 + 1 + 8 + 8 + 1 + 1 + 1 + 8;
  std::string bad = blob_;
  const uint64_t huge = ~uint64_t{0} / 2;
  std::memcpy(bad.data() + elements_at, &huge, 8);
  ExpectRefused(Resealed(bad), "elements");
}

TEST(StatesLoad, ReplacesEveryKey) {
  auto a = Optimizer::Create("sgd", {{"learning_rate", "1"}, {"momentum", "0.5"}});
  const std::string empty = a->SaveStates();
  float w = 0, g = 1;
  a->Update(9, TensorView{&w, DType::kF32, {1}}, TensorView{&g, DType::kF32, {1}});
  EXPECT_EQ(w, -1.0f);
  a->LoadStates(empty);  // key 9's momentum is gone
  w = 0;
  a->Update(9, TensorView{&w, DType::kF32, {1}}, TensorView{&g, DType::kF32, {1}});
  EXPECT_EQ(w, -1.0f);
}

}  // namespace
}  // namespace tandem::kv
