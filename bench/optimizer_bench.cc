// Optimizer and gradient-compression throughput on one core: one update of
// a 16M-element key per optimizer and precision, and a compress/decompress
// of 16M float32 values per type (docs/optimizers.md, docs/benchmarks.md).
//
// Per case: one warm-up call (which also creates the key's state), then
// --rounds timed calls; the table shows the median. Two rates per row:
//   grad GB/s   gradient bytes consumed per second (the payload a server
//               receives), and
//   memory GB/s every byte the call must read or write (weight read and
//               written, gradient read, each state read and written, the
//               master copy read and written under multi-precision;
//               compression: gradient and residual read, residual written,
//               the compressed words written; decompression: words read,
//               floats written).
// For scale: one core's memcpy moves about 8 GB/s here (BENCHMARKING.md).
//
// Usage: optimizer_bench [--rounds N] [--elements N] [--case TEXT]
// (--case runs only the rows whose label contains TEXT, for profiling).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "kv/compression/gradient_compression.h"
#include "kv/optimizer/optimizer.h"

namespace {

using tandem::DType;
using tandem::TensorView;
using tandem::kv::Optimizer;
using tandem::kv::OptimizerParams;
using Clock = std::chrono::steady_clock;

template <typename F>
double MedianSeconds(int rounds, F&& f) {
  f();  // warm-up
  std::vector<double> t;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Case {
  std::string label;
  std::string name;
  OptimizerParams params;
  DType dtype;
  int states;  // state arrays, for the memory-traffic count
};

void Row(const std::string& label, double seconds, double grad_bytes, double memory_bytes) {
  std::printf("| %-28s | %9.2f | %9.2f | %11.2f |\n", label.c_str(), seconds * 1e3,
              grad_bytes / seconds / 1e9, memory_bytes / seconds / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 7;
  size_t n = size_t{16} << 20;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--rounds") {
      rounds = std::atoi(argv[i + 1]);
    } else if (flag == "--case") {
      only = argv[i + 1];
    } else if (flag == "--elements") {
      n = std::strtoull(argv[i + 1], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: %s [--rounds N] [--elements N] [--case TEXT]\n", argv[0]);
      return 2;
    }
  }
  if (rounds < 1 || n == 0) {
    std::fprintf(stderr, "--rounds and --elements must be positive\n");
    return 2;
  }

  const std::vector<Case> cases = {
      {"sgd f32", "sgd", {{"learning_rate", "0.01"}}, DType::kF32, 0},
      {"sgd momentum f32", "sgd", {{"momentum", "0.9"}, {"wd", "1e-4"}}, DType::kF32, 1},
      {"sgd momentum clip f32",
       "sgd",
       {{"momentum", "0.9"}, {"clip_gradient", "1"}},
       DType::kF32,
       1},
      {"nag f32", "nag", {{"momentum", "0.9"}, {"wd", "1e-4"}}, DType::kF32, 1},
      {"adam f32", "adam", {}, DType::kF32, 2},
      {"adagrad f32", "adagrad", {}, DType::kF32, 1},
      {"rmsprop f32", "rmsprop", {}, DType::kF32, 1},
      {"rmsprop centered f32", "rmsprop", {{"centered", "true"}}, DType::kF32, 3},
      {"sgd momentum f64", "sgd", {{"momentum", "0.9"}}, DType::kF64, 1},
      {"adam f64", "adam", {}, DType::kF64, 2},
      {"sgd momentum f16", "sgd", {{"momentum", "0.9"}}, DType::kF16, 1},
      {"sgd momentum f16 mp",
       "sgd",
       {{"momentum", "0.9"}, {"multi_precision", "true"}},
       DType::kF16,
       1},
      {"adam f16 mp", "adam", {{"multi_precision", "true"}}, DType::kF16, 2},
  };

  std::printf("optimizer update of %zu elements, median of %d rounds, one thread\n\n", n, rounds);
  std::printf("| %-28s | %9s | %9s | %11s |\n", "case", "ms", "grad GB/s", "memory GB/s");
  std::printf("|%s|%s|%s|%s|\n", std::string(30, '-').c_str(), std::string(11, '-').c_str(),
              std::string(11, '-').c_str(), std::string(13, '-').c_str());
  for (const Case& c : cases) {
    if (c.label.find(only) == std::string::npos) continue;
    const size_t esize = tandem::ElementSize(c.dtype);
    std::vector<std::byte> weight(n * esize), grad(n * esize);
    // Small values, so that nothing overflows or turns subnormal.
    for (size_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(i % 1000) * 1e-3f - 0.5f;
      if (c.dtype == DType::kF32) {
        std::memcpy(weight.data() + 4 * i, &v, 4);
        std::memcpy(grad.data() + 4 * i, &v, 4);
      } else if (c.dtype == DType::kF64) {
        const double d = v;
        std::memcpy(weight.data() + 8 * i, &d, 8);
        std::memcpy(grad.data() + 8 * i, &d, 8);
      } else {
        const auto h = tandem::base::FloatToHalf(v);
        std::memcpy(weight.data() + 2 * i, &h, 2);
        std::memcpy(grad.data() + 2 * i, &h, 2);
      }
    }
    auto opt = Optimizer::Create(c.name, c.params);
    const std::vector<int64_t> shape = {static_cast<int64_t>(n)};
    const double s = MedianSeconds(rounds, [&] {
      opt->Update(0, TensorView{weight.data(), c.dtype, shape},
                  TensorView{grad.data(), c.dtype, shape});
    });
    const bool mp = c.params.count("multi_precision") != 0;
    const double state_size = mp ? 4.0 : static_cast<double>(esize);
    const double memory =
        static_cast<double>(n) * (3.0 * esize + 2.0 * c.states * state_size + (mp ? 8.0 : 0.0));
    Row(c.label, s, static_cast<double>(n * esize), memory);
  }

  std::printf("\ngradient compression of %zu float32 values\n\n", n);
  std::printf("| %-28s | %9s | %9s | %11s |\n", "case", "ms", "grad GB/s", "memory GB/s");
  std::printf("|%s|%s|%s|%s|\n", std::string(30, '-').c_str(), std::string(11, '-').c_str(),
              std::string(11, '-').c_str(), std::string(13, '-').c_str());
  std::vector<float> g(n), residual(n, 0.0f), out(n);
  for (size_t i = 0; i < n; ++i) g[i] = static_cast<float>(i % 1000) * 2e-3f - 1.0f;
  for (auto [type, label] : {std::pair{tandem::kv::CompressionType::kTwoBit, "2bit"},
                             std::pair{tandem::kv::CompressionType::kOneBit, "1bit"}}) {
    if ((std::string(label) + " compress decompress").find(only) == std::string::npos) continue;
    const tandem::kv::CompressionParams p{type, 0.5f};
    std::vector<std::byte> packed(tandem::kv::CompressedBytes(p, n));
    const double fb = 4.0 * static_cast<double>(n);
    const double cs = MedianSeconds(rounds, [&] { tandem::kv::Compress(p, g, residual, packed); });
    Row(std::string(label) + " compress", cs, fb, 3 * fb + static_cast<double>(packed.size()));
    const double ds = MedianSeconds(rounds, [&] { tandem::kv::Decompress(p, packed, out); });
    Row(std::string(label) + " decompress", ds, fb, fb + static_cast<double>(packed.size()));
  }
  return 0;
}
