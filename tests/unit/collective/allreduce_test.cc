// AllReduce over groups of 1..8 worker threads on the in-process transport,
// for every algorithm x dtype x reduction x size (0, 1, odd counts, and a
// 3 MiB vector), in place and out of place.
//
// Expected values: integers, min, max and prod use inputs whose results are
// exact in every dtype, and must match exactly. Floating-point sum and avg
// use pseudo-random inputs in [-2, 2) and are compared with a reference
// summed in double in rank order 0..n-1. Any order of n-1 additions, each
// rounded to the dtype, differs from that exact sum by at most
// (n-1) u sum|x| (u: the dtype's unit roundoff, 2^-24 for float32, 2^-53
// float64, 2^-11 float16, 2^-8 bfloat16); the division of avg and a final
// rounding add at most 2u|result|. The tests allow (n+2) u sum|x| (divided
// by n for avg).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "collective_job.h"

namespace tandem::collective {
namespace {

using testing::Buffer;
using testing::CollectiveJob;
using testing::UnitRoundoff;

constexpr DType kDTypes[] = {DType::kF32,  DType::kF64, DType::kF16,
                             DType::kBF16, DType::kI32, DType::kI64};
constexpr Reduction kOps[] = {Reduction::kSum, Reduction::kAvg, Reduction::kMin, Reduction::kMax,
                              Reduction::kProd};
constexpr int64_t kCounts[] = {0, 1, 3, 17, 1031, 40001};

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

// Rank r's element i for `op` on `dtype` (before rounding to the dtype).
double Input(Reduction op, DType dtype, int r, int64_t i) {
  const auto u = static_cast<uint64_t>(i);
  const auto ur = static_cast<uint64_t>(r);
  switch (op) {
    case Reduction::kSum:
    case Reduction::kAvg:
      if (base::IsFloatingPoint(dtype)) {
        return static_cast<double>(Mix(u * 131 + ur) % 65536) / 16384.0 - 2.0;
      }
      return static_cast<double>((u * 7 + ur * 13) % 201) - 100.0;
    case Reduction::kMin:
    case Reduction::kMax:
      return static_cast<double>((u * 31 + ur * 17) % 97) - 48.0;
    case Reduction::kProd: {
      const double vals[] = {1.0, -1.0, 2.0, base::IsFloatingPoint(dtype) ? 0.5 : 1.0};
      return vals[(u + ur * 3) % 4];
    }
  }
  return 0;
}

struct Expect {
  double value;
  double tolerance;
};

Expect Reference(Reduction op, DType dtype, const std::vector<Buffer>& inputs, int64_t i) {
  const int n = static_cast<int>(inputs.size());
  double acc = inputs[0].Get(i);
  double magnitude = std::fabs(acc);
  for (int r = 1; r < n; ++r) {
    const double x = inputs[static_cast<size_t>(r)].Get(i);
    magnitude += std::fabs(x);
    switch (op) {
      case Reduction::kSum:
      case Reduction::kAvg:
        acc += x;
        break;
      case Reduction::kMin:
        acc = std::min(acc, x);
        break;
      case Reduction::kMax:
        acc = std::max(acc, x);
        break;
      case Reduction::kProd:
        acc *= x;
        break;
    }
  }
  double tol = 0;
  if (op == Reduction::kSum || op == Reduction::kAvg) {
    tol = (n + 2) * UnitRoundoff(dtype) * magnitude;
  }
  if (op == Reduction::kAvg) {
    if (base::IsFloatingPoint(dtype)) {
      acc /= n;
      tol /= n;
    } else {
      acc = static_cast<double>(static_cast<int64_t>(acc) / n);
    }
  }
  return {acc, tol};
}

// (group size, algorithm, ranks per host: 0 puts every rank on a host of
// its own).
class AllReduceTest : public ::testing::TestWithParam<std::tuple<int, AllReduceAlgorithm, int>> {};

// One dtype x reduction x size: every rank's input and the expected result,
// computed once per job (not once per rank: under the sanitizers that was
// most of the suite's time).
struct Case {
  DType dtype;
  Reduction op;
  int64_t count;
  std::vector<Buffer> inputs;  // by rank
  std::vector<Expect> expected;
};

std::vector<Case> AllCases(int n) {
  std::vector<Case> cases;
  for (DType dtype : kDTypes) {
    for (Reduction op : kOps) {
      for (int64_t count : kCounts) {
        Case c{dtype, op, count, {}, {}};
        for (int r = 0; r < n; ++r) {
          c.inputs.emplace_back(dtype, count);
          for (int64_t i = 0; i < count; ++i) c.inputs.back().Set(i, Input(op, dtype, r, i));
        }
        for (int64_t i = 0; i < count; ++i) c.expected.push_back(Reference(op, dtype, c.inputs, i));
        cases.push_back(std::move(c));
      }
    }
  }
  return cases;
}

TEST_P(AllReduceTest, EveryDTypeOpAndSizeMatchesTheReference) {
  const auto [n, algorithm, per_host] = GetParam();
  const std::vector<Case> cases = AllCases(n);
  CollectiveJob job(n, testing::TestSettings(), {}, per_host);
  job.RunOk([&, n = n, algorithm = algorithm](int rank, CollectiveService& s) {
    Communicator& world = s.World();
    ASSERT_EQ(world.rank(), rank);
    ASSERT_EQ(world.size(), n);
    int round = 0;
    for (const Case& c : cases) {
      Buffer in = c.inputs[static_cast<size_t>(rank)];
      Buffer out(c.dtype, c.count);
      const bool in_place = (round++ % 2) == 0;
      ReduceOptions o;
      o.op = c.op;
      o.algorithm = algorithm;
      o.name = fmt::format("{}/{}/{}", base::DTypeName(c.dtype), ReductionName(c.op), c.count);
      world.AllReduce(in.view(), in_place ? in.view() : out.view(), o);
      const Buffer& got = in_place ? in : out;
      for (int64_t i = 0; i < c.count; ++i) {
        const Expect& e = c.expected[static_cast<size_t>(i)];
        const double g = got.Get(i);
        if (std::fabs(g - e.value) > e.tolerance) {
          ADD_FAILURE() << o.name << (in_place ? " in place" : " out of place") << " rank " << rank
                        << " element " << i << ": got " << g << ", expected " << e.value
                        << " within " << e.tolerance;
          break;
        }
      }
      if (!in_place) {
        // Out of place leaves the input alone.
        ASSERT_EQ(in.bytes, c.inputs[static_cast<size_t>(rank)].bytes) << o.name;
      }
    }
  });
}

// Under ThreadSanitizer the vectors are 384 KiB and the segments 40 KiB
// (still above the 32 KiB from which pieces go by reference, so both the
// by-reference and the copied path run, several segments per block). When
// TSan runs out of thread slots it resets its clocks, and shadow words
// written before the reset then look like races it cannot confirm; each
// costs a stack restore under TSan's global lock. TSan 14 paid that for
// every word (google/sanitizers#1552): at 3 MiB per rank a 16-rank case
// stalled for minutes in CI, twice. Later runtimes skip repeats of one
// thread's stale words only, so the vectors stay small there too; the other
// builds run the full 3 MiB with 64 KiB segments.
constexpr int64_t kLargeVectorBytes = tandem::testing::kUnderTsan ? (3 << 20) / 8 : 3 << 20;
constexpr size_t kLargeVectorSegment = tandem::testing::kUnderTsan ? 40 << 10 : 64 << 10;

TEST_P(AllReduceTest, ThreeMebibytesOfFloat32AndInt64) {
  const auto [n, algorithm, per_host] = GetParam();
  CollectiveJob job(n, testing::TestSettings(testing::kTestPatience, 1, kLargeVectorSegment), {},
                    per_host);
  job.RunOk([&, n = n, algorithm = algorithm](int rank, CollectiveService& s) {
    for (DType dtype : {DType::kF32, DType::kI64}) {
      const int64_t count = kLargeVectorBytes / static_cast<int64_t>(ElementSize(dtype)) + 1;
      Buffer b(dtype, count);
      // Integer-valued, so the float sums are exact too.
      for (int64_t i = 0; i < count; ++i) b.Set(i, static_cast<double>((i % 1000) * (rank + 1)));
      ReduceOptions o;
      o.algorithm = algorithm;
      s.World().AllReduce(b.view(), b.view(), o);
      const double ranks = n * (n + 1) / 2.0;
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(b.Get(i), static_cast<double>(i % 1000) * ranks) << "element " << i;
      }
    }
  });
}

TEST_P(AllReduceTest, PreAndPostScaling) {
  const auto [n, algorithm, per_host] = GetParam();
  CollectiveJob job(n, testing::TestSettings(), {}, per_host);
  job.RunOk([&, n = n, algorithm = algorithm](int rank, CollectiveService& s) {
    for (DType dtype : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
      Buffer b(dtype, 101);
      for (int64_t i = 0; i < 101; ++i) b.Set(i, static_cast<double>(i % 8 + rank));
      ReduceOptions o;
      o.op = Reduction::kAvg;
      o.prescale = 4.0;
      o.postscale = 0.5;
      o.algorithm = algorithm;
      s.World().AllReduce(b.view(), b.view(), o);
      // avg(4 x) / 2 = 2 (i % 8 + (n-1)/2): exact in every dtype here.
      for (int64_t i = 0; i < 101; ++i) {
        ASSERT_EQ(b.Get(i), 2.0 * (static_cast<double>(i % 8) + (n - 1) / 2.0))
            << base::DTypeName(dtype) << " element " << i;
      }
    }
  });
}

TEST_P(AllReduceTest, NarrowWireDtypesRoundTheInputsAndKeepExactSums) {
  const auto [n, algorithm, per_host] = GetParam();
  CollectiveJob job(n, testing::TestSettings(), {}, per_host);
  job.RunOk([&, n = n, algorithm = algorithm](int rank, CollectiveService& s) {
    for (DType wire : {DType::kF16, DType::kBF16}) {
      // Below half the wire dtype's spacing at 1: rounded away on the way
      // out, so it must not reach the result (in float32 it would, n times).
      const double tiny = wire == DType::kF16 ? 0x1p-12 : 0x1p-9;
      for (DType dtype : {DType::kF32, DType::kF64}) {
        for (Reduction op : {Reduction::kSum, Reduction::kAvg}) {
          Buffer in(dtype, 1031), out(dtype, 1031);
          for (int64_t i = 0; i < 1031; ++i)
            in.Set(i, static_cast<double>(i % 8 + rank + 1) + tiny);
          ReduceOptions o;
          o.op = op;
          o.algorithm = algorithm;
          o.wire_dtype = wire;
          if (op == Reduction::kAvg) {  // halves and doubles: still exact
            o.prescale = 0.5;
            o.postscale = 2.0;
          }
          s.World().AllReduce(in.view(), out.view(), o);
          // Integers up to 92: exact in both wire dtypes, every partial sum too.
          for (int64_t i = 0; i < 1031; ++i) {
            const double sum = n * static_cast<double>(i % 8 + 1) + n * (n - 1) / 2.0;
            ASSERT_EQ(out.Get(i), op == Reduction::kSum ? sum : sum / n)
                << base::DTypeName(dtype) << " over " << base::DTypeName(wire) << " "
                << ReductionName(op) << " element " << i;
          }
        }
      }
    }
  });
}

std::string Name(const ::testing::TestParamInfo<AllReduceTest::ParamType>& info) {
  const int per_host = std::get<2>(info.param);
  return fmt::format("n{}_{}{}", std::get<0>(info.param),
                     AllReduceAlgorithmName(std::get<1>(info.param)),
                     per_host > 0 ? fmt::format("_{}_per_host", per_host) : "");
}

INSTANTIATE_TEST_SUITE_P(
    GroupsAndAlgorithms, AllReduceTest,
    ::testing::Combine(::testing::Range(1, 9),
                       ::testing::Values(AllReduceAlgorithm::kRing,
                                         AllReduceAlgorithm::kHalvingDoubling,
                                         AllReduceAlgorithm::kDirect,
                                         AllReduceAlgorithm::kRecursiveDoubling,
                                         AllReduceAlgorithm::kAuto),
                       ::testing::Values(0)),
    Name);

// The hierarchical allreduce on hosts of 1, 2, 3, 4 and 8 ranks, up to 16
// ranks; with uneven hosts (5 ranks, 2 per host: 2 + 2 + 1) it runs the
// ring. kAuto takes it for the 3 MiB vectors (from kHierarchicalMinBytes
// among 2 hosts of 2 ranks or more).
INSTANTIATE_TEST_SUITE_P(Hierarchical, AllReduceTest,
                         ::testing::Values(std::tuple{1, AllReduceAlgorithm::kHierarchical, 1},
                                           std::tuple{3, AllReduceAlgorithm::kHierarchical, 0},
                                           std::tuple{2, AllReduceAlgorithm::kHierarchical, 2},
                                           std::tuple{4, AllReduceAlgorithm::kHierarchical, 2},
                                           std::tuple{4, AllReduceAlgorithm::kAuto, 2},
                                           std::tuple{5, AllReduceAlgorithm::kHierarchical, 2},
                                           std::tuple{6, AllReduceAlgorithm::kHierarchical, 3},
                                           std::tuple{6, AllReduceAlgorithm::kHierarchical, 2},
                                           std::tuple{8, AllReduceAlgorithm::kHierarchical, 4},
                                           std::tuple{12, AllReduceAlgorithm::kHierarchical, 3},
                                           std::tuple{16, AllReduceAlgorithm::kHierarchical, 4},
                                           std::tuple{16, AllReduceAlgorithm::kHierarchical, 8},
                                           std::tuple{16, AllReduceAlgorithm::kAuto, 2}),
                         Name);

TEST(AllReduceArguments, MismatchedOutputAndIntegerScalingAreRefused) {
  CollectiveJob job(2);
  job.RunOk([&](int, CollectiveService& s) {
    Buffer a(DType::kF32, 10), b(DType::kF32, 9), c(DType::kI32, 10);
    EXPECT_THROW(s.World().AllReduce(a.view(), b.view()), InvalidArgument);
    ReduceOptions o;
    o.prescale = 2.0;
    try {
      s.World().AllReduce(c.view(), c.view(), o);
      ADD_FAILURE() << "scaling int32 was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("int32"), std::string::npos) << e.what();
    }
    // A wire dtype that is not a narrower float, or for an integer tensor.
    for (auto [tensor, wire] : {std::pair{&a, DType::kI32}, std::pair{&c, DType::kF16}}) {
      ReduceOptions w;
      w.wire_dtype = wire;
      try {
        s.World().AllReduce(tensor->view(), tensor->view(), w);
        ADD_FAILURE() << "wire dtype " << base::DTypeName(wire) << " was accepted";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(fmt::format("wire dtype {} for a {} tensor",
                                                         base::DTypeName(wire),
                                                         base::DTypeName(tensor->view().dtype))),
                  std::string::npos)
            << e.what();
      }
    }
    // The communicator is still in step: a real operation succeeds.
    a.Set(0, 1.0);
    s.World().AllReduce(a.view(), a.view());
    EXPECT_EQ(a.Get(0), 2.0);
  });
}

}  // namespace
}  // namespace tandem::collective
