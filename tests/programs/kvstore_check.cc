// A worker of the parameter-server system tests (tests/system/
// test_kvstore_launch.py): runs one scenario of store calls through the
// public API and prints what it pulled, one line per observation:
//
//   kvstore_check: <label> <v0>,<v1>,...     (every value, %.9g)
//   kvstore_check: <label> sum=<s> at=<i>:<v>,...   (big keys)
//   kvstore_check: bad <case> ok             (an expected error, checked here)
//   kvstore_check: done scenario=<name> rank=<r>
//
// The test recomputes every number in closed form (and the compressed ones
// with its own reference quantiser) and compares. Exits non-zero with the
// error when a call fails unexpectedly. A server or scheduler process (under
// a launcher that starts this one command everywhere) serves its role.
//
//   kvstore_check --scenario sync|optimizer|async|compress2|compress1|steady [--dir D]
//                 [--rounds N]   (steady: N push/pull rounds 100 ms apart)
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "kv/optimizer/optimizer.h"
#include "tandem/cluster.h"
#include "tandem/error.h"
#include "tandem/kvstore.h"

namespace {

using tandem::DType;
using tandem::KVStore;
using tandem::TensorView;

struct Tensor {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
  Tensor(DType t, std::vector<int64_t> s, const std::function<double(size_t)>& fill = nullptr)
      : dtype(t), shape(std::move(s)) {
    bytes.resize(size() * tandem::ElementSize(t));
    for (size_t i = 0; i < size(); ++i) set(i, fill ? fill(i) : 0.0);
  }
  size_t size() const {
    size_t n = 1;
    for (auto d : shape) n *= static_cast<size_t>(d);
    return n;
  }
  TensorView view() { return TensorView{bytes.data(), dtype, shape}; }
  void set(size_t i, double v) {
    if (dtype == DType::kF32) {
      reinterpret_cast<float*>(bytes.data())[i] = static_cast<float>(v);
    } else if (dtype == DType::kF16) {
      reinterpret_cast<tandem::base::Half*>(bytes.data())[i] =
          tandem::base::FloatToHalf(static_cast<float>(v));
    } else {
      reinterpret_cast<double*>(bytes.data())[i] = v;
    }
  }
  double at(size_t i) const {
    if (dtype == DType::kF32) return reinterpret_cast<const float*>(bytes.data())[i];
    if (dtype == DType::kF16) {
      return tandem::base::HalfToFloat(
          reinterpret_cast<const tandem::base::Half*>(bytes.data())[i]);
    }
    return reinterpret_cast<const double*>(bytes.data())[i];
  }
};

void PrintAll(const std::string& label, const Tensor& t) {
  std::string s;
  char buf[32];
  for (size_t i = 0; i < t.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.9g", i ? "," : "", t.at(i));
    s += buf;
  }
  std::printf("kvstore_check: %s %s\n", label.c_str(), s.c_str());
}

void PrintBig(const std::string& label, const Tensor& t, const std::vector<size_t>& at) {
  double sum = 0;
  for (size_t i = 0; i < t.size(); ++i) sum += t.at(i);
  std::string s;
  char buf[64];
  for (size_t i : at) {
    std::snprintf(buf, sizeof buf, "%s%zu:%.9g", s.empty() ? "" : ",", i, t.at(i));
    s += buf;
  }
  std::printf("kvstore_check: %s sum=%.17g at=%s\n", label.c_str(), sum, s.c_str());
}

// Runs `f`, which must throw E with `needle` in its text.
template <typename E>
void ExpectError(const std::string& name, const std::function<void()>& f,
                 const std::string& needle) {
  try {
    f();
  } catch (const E& e) {
    if (std::string(e.what()).find(needle) == std::string::npos) {
      throw std::runtime_error("bad " + name + ": error lacks '" + needle + "': " + e.what());
    }
    std::printf("kvstore_check: bad %s ok\n", name.c_str());
    return;
  }
  throw std::runtime_error("bad " + name + ": no error (expected one with '" + needle + "')");
}

void Sync(KVStore& kv, int rank) {
  // Small key, three rounds: the pulled value is the round's sum.
  Tensor w(DType::kF32, {20}, [](size_t i) { return double(i); });
  kv.Init(0, w.view());
  kv.Pull(0, w.view());
  PrintAll("k0 init", w);
  for (int r = 1; r <= 3; ++r) {
    Tensor g(DType::kF32, {20}, [&](size_t i) { return (rank + 1) * double(i % 7 + r); });
    kv.Push(0, g.view());
    kv.Pull(0, w.view());
    PrintAll("k0 round" + std::to_string(r), w);
  }
  // Above MXNET_KVSTORE_BIGARRAY_BOUND (1000000): split across the servers.
  const size_t big = 1000003;
  Tensor b(DType::kF32, {static_cast<int64_t>(big)});
  kv.Init(1, b.view());
  Tensor gb(DType::kF32, {static_cast<int64_t>(big)},
            [&](size_t i) { return (rank + 1) * double(i % 13); });
  kv.PushPull(1, gb.view(), b.view());
  PrintBig("k1 big", b, {0, 1, 500001, 500002, big - 1});
  // float16.
  Tensor h(DType::kF16, {33});
  kv.Init(2, h.view());
  Tensor gh(DType::kF16, {33}, [&](size_t i) { return (rank + 1) * double(i % 5) + 0.5; });
  kv.Push(2, gh.view());
  kv.Pull(2, h.view());
  PrintAll("k2 fp16", h);
  // Row-sparse pull of a split key (2000 rows of 600): only those rows travel.
  Tensor rs(DType::kF32, {2000, 600});
  kv.Init(3, rs.view());
  Tensor grs(DType::kF32, {2000, 600}, [&](size_t i) { return (rank + 1) * double(i / 600); });
  kv.Push(3, grs.view());
  Tensor rows(DType::kF32, {5, 600});
  kv.RowSparsePull(3, rows.view(), {0, 1, 999, 1000, 1999});
  PrintBig("k3 rows", rows, {0, 599, 600, 1200, 1800, 2400, 2999});
  // Row-sparse push of rows {rank, 1500} (one on each server's side).
  Tensor pushed(DType::kF32, {2, 600}, [&](size_t) { return double(rank + 1); });
  kv.RowSparsePush(3, pushed.view(), {rank, 1500});
  kv.RowSparsePull(3, rows.view(), {0, 3, 4, 1500, 1999});
  PrintBig("k3 pushed-rows", rows, {0, 600, 1200, 1800, 2400, 2999});
  // update_on_kvstore=false: the servers only sum; each worker updates its
  // own copy with the optimizer on its side.
  auto sgd = tandem::kv::Optimizer::Create("sgd", {{"learning_rate", "0.5"}});
  Tensor local(DType::kF32, {10}, [](size_t i) { return double(i); });
  Tensor gsum(DType::kF32, {10});
  kv.Init(4, gsum.view());
  for (int r = 0; r < 2; ++r) {
    Tensor g(DType::kF32, {10}, [&](size_t i) { return (rank + 1) * double(i % 3); });
    kv.PushPull(4, g.view(), gsum.view());
    sgd->Update(4, local.view(), gsum.view());
  }
  PrintAll("k4 local-update", local);
  // Two local devices.
  Tensor d0(DType::kF32, {8}, [&](size_t i) { return double(rank) + double(i); });
  Tensor d1(DType::kF32, {8}, [&](size_t) { return 1.0; });
  Tensor o(DType::kF32, {8});
  kv.Init(5, o.view());
  kv.Push(5, std::vector<TensorView>{d0.view(), d1.view()});
  kv.Pull(5, o.view());
  PrintAll("k5 devices", o);

  // Every bad input fails that call only; then a round is exact.
  Tensor k6(DType::kF32, {6}, [](size_t i) { return double(i); });
  kv.Init(6, k6.view());
  Tensor wrong_dtype(DType::kF64, {6});
  Tensor wrong_shape(DType::kF32, {7});
  using tandem::InvalidArgument;
  ExpectError<InvalidArgument>(
      "unknown-key", [&] { kv.Push(99, k6.view()); }, "never initialised");
  ExpectError<InvalidArgument>(
      "pull-unknown-key", [&] { kv.Pull(99, k6.view()); }, "never initialised");
  ExpectError<InvalidArgument>(
      "dtype", [&] { kv.Push(6, wrong_dtype.view()); }, "expected dtype float32, got float64");
  ExpectError<InvalidArgument>(
      "shape", [&] { kv.Push(6, wrong_shape.view()); }, "expected shape [6]");
  ExpectError<InvalidArgument>(
      "pull-size", [&] { kv.Pull(6, wrong_shape.view()); }, "got [7]");
  ExpectError<InvalidArgument>(
      "double-init", [&] { kv.Init(6, k6.view()); }, "double init");
  ExpectError<InvalidArgument>(
      "mixed-keys", [&] { kv.Init("name", k6.view()); }, "mixing");
  Tensor g6(DType::kF32, {6}, [&](size_t i) { return double(rank) * double(i); });
  kv.Push(6, g6.view());
  kv.Pull(6, k6.view());
  PrintAll("k6 after-bad", k6);
}

void WithOptimizer(KVStore& kv, int rank, const std::string& dir) {
  kv.SetOptimizer("sgd",
                  {{"learning_rate", "0.5"}, {"momentum", "0.5"}, {"multi_precision", "true"}});
  Tensor w(DType::kF32, {12}, [](size_t i) { return double(i); });
  Tensor h(DType::kF16, {12}, [](size_t i) { return double(i); });
  kv.Init(0, w.view());
  kv.Init(1, h.view());
  auto round = [&](int r) {
    Tensor g(DType::kF32, {12}, [&](size_t i) { return (rank + 1) * double(i % 3 + 1); });
    Tensor gh(DType::kF16, {12}, [&](size_t i) { return (rank + 1) * double(i % 3 + 1) / 4; });
    kv.Push(0, g.view());
    kv.Push(1, gh.view());
    kv.Pull(0, w.view());
    kv.Pull(1, h.view());
    PrintAll("opt round" + std::to_string(r), w);
    PrintAll("opt fp16 round" + std::to_string(r), h);
  };
  for (int r = 1; r <= 3; ++r) round(r);
  kv.SaveOptimizerStates(dir + "/states");
  round(4);
  kv.LoadOptimizerStates(dir + "/states");  // the momentum of round 3 again
  round(5);
}

// `rounds` push/pull rounds of one key, 100 ms apart: a job that lasts long
// enough to be watched (tests/system/test_metrics_launch.py). Prints the
// last pulled value.
void Steady(KVStore& kv, int rank, int rounds) {
  Tensor w(DType::kF32, {64});
  kv.Init(0, w.view());
  for (int r = 1; r <= rounds; ++r) {
    Tensor g(DType::kF32, {64}, [&](size_t i) { return (rank + 1) * double(i % 7 + r); });
    kv.Push(0, g.view());
    kv.Pull(0, w.view());
    usleep(100 * 1000);
  }
  PrintAll("steady last", w);
}

void Async(KVStore& kv, int rank) {
  Tensor w(DType::kF32, {16}, [](size_t i) { return 100.0 + double(i); });
  kv.Init(0, w.view());
  tandem::KVHandle h;
  if (rank == 0) {
    ExpectError<tandem::InvalidArgument>(
        "async-without-optimizer", [&] { kv.Push(0, w.view()); }, "optimizer");
  }
  kv.Barrier();
  kv.SetOptimizer("sgd", {{"learning_rate", "0.5"}});
  Tensor ones(DType::kF32, {16}, [](size_t) { return 1.0; });
  std::vector<tandem::KVHandle> handles;
  for (int p = 0; p < 10; ++p) handles.push_back(kv.PushAsync(0, {ones.view()}));
  for (auto& x : handles) x.Wait();
  kv.Barrier();
  kv.Pull(0, w.view());
  PrintAll("async final", w);
}

void Compressed(KVStore& kv, int rank, const std::string& type) {
  kv.SetGradientCompression({{"type", type}, {"threshold", "0.5"}});
  Tensor w(DType::kF32, {40}, [](size_t i) { return double(i); });
  kv.Init(0, w.view());
  const size_t big = 1000010;
  Tensor b(DType::kF32, {static_cast<int64_t>(big)});
  kv.Init(1, b.view());
  for (int r = 0; r < 3; ++r) {
    const double pattern[] = {0.6, -0.9, 0.2, 0.0, 0.3, -0.2, 1.7, -0.25};
    Tensor g(DType::kF32, {40}, [&](size_t i) { return pattern[i % 8] * (rank + 1) + 0.125 * r; });
    kv.Push(0, g.view());
    kv.Pull(0, w.view());
    PrintAll("cmp round" + std::to_string(r), w);
    Tensor gb(DType::kF32, {static_cast<int64_t>(big)},
              [&](size_t i) { return pattern[i % 8] * (rank + 1) + 0.125 * r; });
    kv.PushPull(1, gb.view(), b.view());
    PrintBig("cmp big round" + std::to_string(r), b, {0, 1, 2, 7, 500000, 500015, big - 1});
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario = "sync";
  std::string dir = "/tmp";
  int rounds = 40;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--scenario" && i + 1 < argc) {
      scenario = argv[++i];
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else {
      std::fprintf(stderr, "kvstore_check: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  try {
    // Started by a launcher that runs one command everywhere (mpirun, srun,
    // torchrun, a Volcano job), a server or scheduler serves here and exits.
    if (auto code = tandem::ServeAssignedRole()) return *code;
    const std::string type = scenario == "async" ? "dist_async" : "dist_sync";
    auto kv = KVStore::Create(type);
    const int rank = kv->Rank();
    if (scenario == "sync") {
      Sync(*kv, rank);
    } else if (scenario == "optimizer") {
      WithOptimizer(*kv, rank, dir);
    } else if (scenario == "async") {
      Async(*kv, rank);
    } else if (scenario == "steady") {
      Steady(*kv, rank, rounds);
    } else if (scenario == "compress2") {
      Compressed(*kv, rank, "2bit");
    } else if (scenario == "compress1") {
      Compressed(*kv, rank, "1bit");
    } else {
      std::fprintf(stderr, "kvstore_check: unknown scenario '%s'\n", scenario.c_str());
      return 2;
    }
    std::printf("kvstore_check: done scenario=%s rank=%d workers=%d servers=%d\n", scenario.c_str(),
                rank, kv->NumWorkers(), kv->NumServers());
    std::fflush(stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvstore_check (pid %d): error: %s\n", getpid(), e.what());
    return 1;
  }
}
