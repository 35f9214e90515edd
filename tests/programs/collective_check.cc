// A job process for tests/system/test_collective_launch.py: joins with
// tandem::Collectives and checks every operation's result exactly.
//
//   collective_check                 every op x dtype x algorithm on a few
//                                    sizes; prints "collective_check: ok
//                                    rank=R size=N checks=K" and exits 0
//   collective_check --steady N      N checked allreduces 100 ms apart (a job
//                                    that lasts, for tests/system/
//                                    test_metrics_launch.py)
//   collective_check --die-rank R    after two good allreduces, worker R
//                                    sends itself SIGKILL; the others keep
//                                    calling AllReduce and must get PeerLost:
//                                    they print "collective_check: PeerLost:
//                                    <text>" and exit 3
//   collective_check --engine        the framework engine: three steps of
//                                    tensors submitted in another order on
//                                    every rank, checked exactly; then a
//                                    tensor whose shape differs on the last
//                                    rank must fail on every rank, and the
//                                    next request must succeed; prints
//                                    "collective_check: engine ok rank=R
//                                    size=N mismatch=<error text>" and the
//                                    counters, exits 0
// Any wrong element prints what was expected and got and exits 1.
#include <fmt/format.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "tandem/collective.h"
#include "tandem/error.h"
#include "tandem/fusion_engine.h"

namespace {

using tandem::DType;

struct Tensor {
  DType dtype;
  std::vector<std::byte> bytes;
  int64_t count;
  Tensor(DType d, int64_t n)
      : dtype(d), bytes(static_cast<size_t>(n) * tandem::ElementSize(d)), count(n) {}
  tandem::TensorView view() { return {bytes.empty() ? nullptr : bytes.data(), dtype, {count}}; }
  double Get(int64_t i) const {
    return tandem::base::VisitDType(dtype, [&](auto type) -> double {
      using T = typename decltype(type)::type;
      T v;
      std::memcpy(&v, bytes.data() + static_cast<size_t>(i) * sizeof(T), sizeof(T));
      if constexpr (std::is_same_v<T, tandem::base::Half>)
        return tandem::base::HalfToFloat(v);
      else if constexpr (std::is_same_v<T, tandem::base::BFloat16>)
        return tandem::base::BFloat16ToFloat(v);
      else
        return static_cast<double>(v);
    });
  }
  void Set(int64_t i, double x) {
    tandem::base::VisitDType(dtype, [&](auto type) {
      using T = typename decltype(type)::type;
      T v;
      if constexpr (std::is_same_v<T, tandem::base::Half>)
        v = tandem::base::FloatToHalf(static_cast<float>(x));
      else if constexpr (std::is_same_v<T, tandem::base::BFloat16>)
        v = tandem::base::FloatToBFloat16(static_cast<float>(x));
      else
        v = static_cast<T>(x);
      std::memcpy(bytes.data() + static_cast<size_t>(i) * sizeof(T), &v, sizeof(T));
    });
  }
};

int checks = 0;

void Expect(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    std::fprintf(stderr, "collective_check: WRONG: %s\n", what.c_str());
    std::fflush(stderr);
    std::_Exit(1);
  }
}

void CheckAll(tandem::Communicator& world) {
  const int n = world.size();
  const int r = world.rank();
  const DType dtypes[] = {DType::kF32,  DType::kF64, DType::kF16,
                          DType::kBF16, DType::kI32, DType::kI64};
  const tandem::AllReduceAlgorithm algorithms[] = {
      tandem::AllReduceAlgorithm::kRing,         tandem::AllReduceAlgorithm::kHalvingDoubling,
      tandem::AllReduceAlgorithm::kDirect,       tandem::AllReduceAlgorithm::kRecursiveDoubling,
      tandem::AllReduceAlgorithm::kHierarchical, tandem::AllReduceAlgorithm::kAuto};
  for (DType dtype : dtypes) {
    const std::string dn(tandem::base::DTypeName(dtype));
    for (auto algorithm : algorithms) {
      for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{1031}, int64_t{300007}}) {
        // sum: integers 0..99 times rank+1 are exact in every dtype but
        // the 16-bit floats; those get 0..9 (sums below 256).
        const int64_t mod = (dtype == DType::kF16 || dtype == DType::kBF16) ? 10 : 100;
        Tensor t(dtype, count);
        for (int64_t i = 0; i < count; ++i) t.Set(i, static_cast<double>((i % mod) * (r + 1)));
        tandem::ReduceOptions o;
        o.algorithm = algorithm;
        o.name = fmt::format("sum/{}/{}/{}", dn, AllReduceAlgorithmName(algorithm), count);
        world.AllReduce(t.view(), t.view(), o);
        for (int64_t i = 0; i < count; ++i) {
          const double want = static_cast<double>((i % mod) * n * (n + 1) / 2);
          if (t.Get(i) != want)
            Expect(false, fmt::format("{} [{}]: got {} want {}", o.name, i, t.Get(i), want));
        }
        Expect(true, o.name);
        // max and min, out of place.
        Tensor out(dtype, count);
        for (int64_t i = 0; i < count; ++i) t.Set(i, static_cast<double>((i + r) % 50));
        o.op = tandem::Reduction::kMax;
        o.name = "max/" + o.name;
        world.AllReduce(t.view(), out.view(), o);
        for (int64_t i = 0; i < count; ++i) {
          double want = 0;
          for (int k = 0; k < n; ++k) want = std::max(want, static_cast<double>((i + k) % 50));
          if (out.Get(i) != want)
            Expect(false, fmt::format("{} [{}]: got {} want {}", o.name, i, out.Get(i), want));
        }
        Expect(true, o.name);
      }
    }
    // Broadcast from every root.
    for (int root = 0; root < n; ++root) {
      Tensor t(dtype, 70001);
      for (int64_t i = 0; i < t.count; ++i)
        t.Set(i, r == root ? static_cast<double>(i % 200) : -1.0);
      world.Broadcast(t.view(), root, {"bcast/" + dn, {}});
      for (int64_t i = 0; i < t.count; ++i) {
        if (t.Get(i) != static_cast<double>(i % 200))
          Expect(false, fmt::format("broadcast {} root {} [{}]", dn, root, i));
      }
      Expect(true, "broadcast");
    }
    // AllGather, ReduceScatter, AllToAll.
    const int64_t block = 5003;
    Tensor in(dtype, block), all(dtype, block * n);
    for (int64_t i = 0; i < block; ++i) in.Set(i, static_cast<double>((i + 7 * r) % 100));
    world.AllGather(in.view(), all.view(), {"allgather/" + dn, {}});
    for (int k = 0; k < n; ++k) {
      for (int64_t i = 0; i < block; ++i) {
        if (all.Get(k * block + i) != static_cast<double>((i + 7 * k) % 100))
          Expect(false, fmt::format("allgather {} block {} [{}]", dn, k, i));
      }
    }
    Expect(true, "allgather");
    Tensor big(dtype, block * n), part(dtype, block);
    for (int64_t i = 0; i < block * n; ++i) big.Set(i, static_cast<double>(i % 20 + r));
    tandem::ReduceOptions rs;
    rs.name = "reduce_scatter/" + dn;
    world.ReduceScatter(big.view(), part.view(), rs);
    for (int64_t i = 0; i < block; ++i) {
      const double want = static_cast<double>(n * ((r * block + i) % 20) + n * (n - 1) / 2);
      if (part.Get(i) != want)
        Expect(false,
               fmt::format("reduce_scatter {} [{}]: got {} want {}", dn, i, part.Get(i), want));
    }
    Expect(true, "reduce_scatter");
    Tensor a2a(dtype, block * n);
    for (int k = 0; k < n; ++k) {
      for (int64_t i = 0; i < block; ++i) big.Set(k * block + i, static_cast<double>(10 * r + k));
    }
    world.AllToAll(big.view(), a2a.view(), {"alltoall/" + dn, {}});
    for (int k = 0; k < n; ++k) {
      if (a2a.Get(k * block + block - 1) != static_cast<double>(10 * k + r))
        Expect(false, fmt::format("alltoall {} block {}", dn, k));
    }
    Expect(true, "alltoall");
  }
  world.Barrier({"end of checks", {}});
}

}  // namespace

// `rounds` allreduces of 4096 float32 (element i of rank r is i % 10 + r),
// 100 ms apart, each checked: a job that lasts long enough to be watched
// (its /metrics scraped).
void Steady(tandem::Communicator& world, int rounds) {
  const int n = world.size();
  for (int round = 0; round < rounds; ++round) {
    Tensor t(DType::kF32, 4096);
    for (int64_t i = 0; i < 4096; ++i) t.Set(i, static_cast<double>(i % 10 + world.rank()));
    tandem::ReduceOptions o;
    o.name = fmt::format("steady/{}", round);
    world.AllReduce(t.view(), t.view(), o);
    for (int64_t i = 0; i < 4096; ++i) {
      const double want = static_cast<double>(n * (i % 10) + n * (n - 1) / 2);
      if (t.Get(i) != want)
        Expect(false, fmt::format("{} [{}]: got {} want {}", o.name, i, t.Get(i), want));
    }
    Expect(true, o.name);
    usleep(100 * 1000);
  }
}

// See --engine above. Throws on any wrong result.
std::string CheckEngine(tandem::Collectives& c) {
  const int n = c.world().size();
  const int rank = c.world().rank();
  std::vector<int> all(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) all[static_cast<size_t>(r)] = r;
  tandem::FusionEngine engine(c.NewGroup(all), tandem::FusionEngine::Options::FromEnvironment());
  constexpr int kTensors = 24;
  for (int step = 0; step < 3; ++step) {
    std::vector<Tensor> ts;
    for (int t = 0; t < kTensors; ++t) {
      ts.emplace_back(t % 3 == 0 ? DType::kI64 : DType::kF32, 1 + t * 977 % 5003);
      for (int64_t e = 0; e < ts.back().count; ++e) ts.back().Set(e, rank + 1 + e % 7 + step);
    }
    std::vector<tandem::CollectiveHandle> hs(kTensors);
    for (int k = 0; k < kTensors; ++k) {
      // Another order per rank: rotated, and reversed on odd ranks.
      const int t =
          rank % 2 == 1 ? (kTensors - 1 - k + rank) % kTensors : (k + 5 * rank) % kTensors;
      hs[static_cast<size_t>(t)] =
          engine.AllReduce(fmt::format("grad.{}", t), ts[static_cast<size_t>(t)].view(),
                           ts[static_cast<size_t>(t)].view());
    }
    for (int t = 0; t < kTensors; ++t) {
      hs[static_cast<size_t>(t)].Wait();
      const Tensor& x = ts[static_cast<size_t>(t)];
      for (int64_t e = 0; e < x.count; ++e) {
        const double want = n * (n + 1) / 2.0 + n * (e % 7 + step);
        if (x.Get(e) != want) {
          throw tandem::Error(fmt::format("engine step {} grad.{} element {}: expected {}, got {}",
                                          step, t, e, want, x.Get(e)));
        }
      }
    }
  }
  Tensor bad(DType::kF32, rank == n - 1 ? 12 : 10);
  std::string mismatch;
  try {
    engine.AllReduce("mismatched", bad.view(), bad.view()).Wait();
    throw tandem::Error("the mismatched tensor did not fail");
  } catch (const tandem::InvalidArgument& e) {
    mismatch = e.what();
  }
  Tensor next(DType::kF64, 5);
  for (int64_t e = 0; e < 5; ++e) next.Set(e, rank);
  engine.AllReduce("mismatched", next.view(), next.view()).Wait();
  for (int64_t e = 0; e < 5; ++e) {
    if (next.Get(e) != n * (n - 1) / 2.0)
      throw tandem::Error("engine: the request after the mismatch is wrong");
  }
  const tandem::FusionEngine::Stats st = engine.stats();
  return fmt::format("mismatch={} negotiated={} cached={} fused={} collectives={}", mismatch,
                     st.negotiated, st.cached, st.fused_tensors, st.collectives);
}

int main(int argc, char** argv) {
  bool engine = false;
  int die_rank = -1;
  int steady = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--die-rank" && i + 1 < argc) die_rank = std::stoi(argv[++i]);
    if (std::string(argv[i]) == "--steady" && i + 1 < argc) steady = std::stoi(argv[++i]);
    if (std::string(argv[i]) == "--engine") engine = true;
  }
  std::unique_ptr<tandem::Collectives> c;
  try {
    c = tandem::Collectives::Join();
    tandem::Communicator& world = c->world();
    std::printf("collective_check: pid=%d rank=%d size=%d\n", getpid(), world.rank(), world.size());
    std::fflush(stdout);
    if (die_rank >= 0) {
      Tensor t(DType::kF32, 1 << 16);
      // Named: a peer may still be in the last of these when the victim dies
      // (the victim can finish first, and a killed socket's unread data
      // turns into a reset that loses what it had sent).
      tandem::ReduceOptions before;
      before.name = "before-death";
      for (int k = 0; k < 2; ++k) world.AllReduce(t.view(), t.view(), before);
      if (world.rank() == die_rank) {
        std::printf("collective_check: rank %d dies now\n", world.rank());
        std::fflush(stdout);
        std::raise(SIGKILL);
      }
      for (;;) {
        tandem::ReduceOptions o;
        o.name = "after-death";
        world.AllReduce(t.view(), t.view(), o);
      }
    }
    if (engine) {
      const std::string report = CheckEngine(*c);
      std::printf("collective_check: engine ok rank=%d size=%d %s\n", world.rank(), world.size(),
                  report.c_str());
      std::fflush(stdout);
      c->Finalize();
      return 0;
    }
    if (steady > 0) {
      Steady(world, steady);
    } else {
      CheckAll(world);
    }
    std::printf("collective_check: ok rank=%d size=%d checks=%d\n", world.rank(), world.size(),
                checks);
    std::fflush(stdout);
    c->Finalize();
    return 0;
  } catch (const tandem::PeerLost& e) {
    std::fprintf(stderr, "collective_check: PeerLost: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collective_check: error: %s\n", e.what());
    return 2;
  }
}
