// tandem::GradientQuantizer, the public face of the parameter server's
// quantisers (what tandem.torch's allreduce path uses): it must produce the
// very bytes and residuals kv::Compress does (gradient_compression_test.cc
// checks those against a reference), expand them as kv::Decompress does,
// and refuse tensors of the wrong dtype or size naming the argument.
// Parameterised over type and sizes that are and are not whole words.
#include "tandem/gradient_quantizer.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "kv/compression/gradient_compression.h"
#include "tandem/error.h"

namespace tandem {
namespace {

using Params = std::map<std::string, std::string>;

TensorView View(std::vector<float>& v) {
  return {v.data(), DType::kF32, {static_cast<int64_t>(v.size())}};
}
TensorView View(std::vector<std::byte>& v) {
  return {v.data(), DType::kU8, {static_cast<int64_t>(v.size())}};
}

struct Case {
  std::string type;
  size_t count;
};

class GradientQuantizerTest : public ::testing::TestWithParam<Case> {};

TEST_P(GradientQuantizerTest, MatchesTheParameterServersQuantiser) {
  const Case& c = GetParam();
  GradientQuantizer q({{"type", c.type}, {"threshold", "0.25"}});
  EXPECT_EQ(q.type(), c.type);
  EXPECT_FLOAT_EQ(q.threshold(), 0.25f);
  kv::CompressionParams params =
      kv::ParseCompressionParams({{"type", c.type}, {"threshold", "0.25"}});
  ASSERT_EQ(q.QuantizedBytes(c.count), kv::CompressedBytes(params, c.count));
  std::vector<float> grad(c.count), residual(c.count, 0.0f), ref_residual(c.count, 0.0f);
  std::vector<std::byte> words(q.QuantizedBytes(c.count)), ref_words(words.size());
  for (int call = 0; call < 3; ++call) {  // the residual carries over
    for (size_t i = 0; i < c.count; ++i) {
      grad[i] = static_cast<float>((static_cast<int>(i * 7 + call * 3) % 11) - 5) * 0.07f;
    }
    q.Quantize(View(grad), View(residual), View(words));
    kv::Compress(params, grad, ref_residual, ref_words);
    ASSERT_EQ(words, ref_words) << "call " << call;
    ASSERT_EQ(residual, ref_residual) << "call " << call;
    std::vector<float> out(c.count), ref_out(c.count);
    q.Dequantize(View(words), View(out));
    kv::Decompress(params, ref_words, ref_out);
    ASSERT_EQ(out, ref_out) << "call " << call;
    std::vector<float> sum(c.count, 1.5f);
    q.DequantizeAdd(View(words), View(sum));
    for (size_t i = 0; i < c.count; ++i) {
      ASSERT_EQ(sum[i], 1.5f + ref_out[i]) << "call " << call << " value " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, GradientQuantizerTest,
                         ::testing::Values(Case{"2bit", 1}, Case{"2bit", 16}, Case{"2bit", 17},
                                           Case{"2bit", 1000}, Case{"2bit", 4096 + 17},
                                           Case{"1bit", 1}, Case{"1bit", 32}, Case{"1bit", 33},
                                           Case{"1bit", 1000}, Case{"1bit", 2 * 4096 + 1}));

struct BadCall {
  std::string what;
  std::string message;
};

class GradientQuantizerRefusesTest : public ::testing::TestWithParam<BadCall> {};

TEST_P(GradientQuantizerRefusesTest, NamesTheArgument) {
  GradientQuantizer q(Params{{"type", "2bit"}});
  std::vector<float> grad(40, 1.0f), residual(40, 0.0f), short_residual(39, 0.0f), out(40);
  std::vector<double> wide(40, 1.0);
  std::vector<std::byte> words(q.QuantizedBytes(40)), short_words(4);
  const std::string& w = GetParam().what;
  auto call = [&] {
    if (w == "grad dtype") {
      q.Quantize({wide.data(), DType::kF64, {40}}, View(residual), View(words));
    } else if (w == "residual size") {
      q.Quantize(View(grad), View(short_residual), View(words));
    } else if (w == "out size") {
      q.Quantize(View(grad), View(residual), View(short_words));
    } else if (w == "out dtype") {
      q.Quantize(View(grad), View(residual), View(out));
    } else if (w == "in size") {
      q.Dequantize(View(short_words), View(out));
    } else if (w == "add in size") {
      q.DequantizeAdd(View(short_words), View(out));
    }
  };
  try {
    call();
    FAIL() << w << ": no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(GetParam().message), std::string::npos) << e.what();
  }
  EXPECT_EQ(residual, std::vector<float>(40, 0.0f)) << "a refused call wrote the residual";
}

INSTANTIATE_TEST_SUITE_P(
    Calls, GradientQuantizerRefusesTest,
    ::testing::Values(BadCall{"grad dtype", "Quantize: grad is float64, expected float32"},
                      BadCall{"residual size", "Quantize: residual has 39 elements, expected 40"},
                      BadCall{"out size", "Quantize: out has 4 elements, expected 12"},
                      BadCall{"out dtype", "Quantize: out is float32, expected uint8"},
                      BadCall{"in size", "Dequantize: in has 4 elements, expected 12"},
                      BadCall{"add in size", "DequantizeAdd: in has 4 elements, expected 12"}));

TEST(GradientQuantizerParams, RefusesNoneAndBadEntries) {
  EXPECT_THROW(GradientQuantizer(Params{{"type", "none"}}), InvalidArgument);
  EXPECT_THROW(GradientQuantizer(Params{{"type", "3bit"}}), InvalidArgument);
  EXPECT_THROW(GradientQuantizer(Params{{"type", "2bit"}, {"threshold", "0"}}), InvalidArgument);
  EXPECT_THROW(GradientQuantizer(Params{{"type", "2bit"}, {"bound", "1"}}), InvalidArgument);
}

}  // namespace
}  // namespace tandem
