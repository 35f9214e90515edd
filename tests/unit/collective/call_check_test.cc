// Call checks (docs/collectives.md "Call checks"): when the members of a
// communicator make different calls at the same point, every member raises
// CallMismatch naming each rank's call, and no member returns a result.
// Each case runs over 2-5 workers, with the same-host copy and mailbox on
// (small pieces through the mailbox, large by reference) and off (TCP).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <thread>

#include "collective/call_description.h"
#include "collective_job.h"

namespace tandem::collective {
namespace {

using testing::Buffer;
using testing::CollectiveJob;
using testing::Is;
using testing::TestSettings;
using testing::What;
using Clock = std::chrono::steady_clock;

// One kind of disagreement: what rank `rank` of `n` calls, and what every
// rank's message must contain (given n).
struct Case {
  const char* name;
  std::function<void(int rank, int n, CollectiveService& s)> call;
  std::function<std::vector<std::string>(int n)> says;
};

std::string Others(int n) { return n == 2 ? "rank 1" : fmt::format("ranks 1-{}", n - 1); }

ReduceOptions Timed(ReduceOptions o = {}) {
  o.timeout = std::chrono::seconds(20);
  return o;
}

std::vector<Case> Cases() {
  return {
      {"wire_dtype",
       [](int rank, int, CollectiveService& s) {
         Buffer b(DType::kF32, 10);
         ReduceOptions o = Timed();
         o.name = "grad";
         if (rank == 0) o.wire_dtype = DType::kF16;
         s.World().AllReduce(b.view(), b.view(), o);
       },
       [](int n) {
         return std::vector<std::string>{"allreduce 'grad': mismatched dtype",
                                         "rank 0 float16 [10]", Others(n) + " float32 [10]"};
       }},
      {"dtype",
       [](int rank, int, CollectiveService& s) {
         Buffer b(rank == 0 ? DType::kF32 : DType::kI32, 10);
         ReduceOptions o = Timed();
         o.name = "layer3.weight";
         s.World().AllReduce(b.view(), b.view(), o);
       },
       [](int n) {
         return std::vector<std::string>{
             "allreduce 'layer3.weight': mismatched dtype at operation 1 of communicator world",
             "rank 0 float32 [10]", Others(n) + " int32 [10]"};
       }},
      {"order",
       [](int rank, int, CollectiveService& s) {
         Buffer a(DType::kF32, 4), b(DType::kF32, 4);
         ReduceOptions oa = Timed(), ob = Timed();
         oa.name = "a";
         ob.name = "b";
         if (rank == 0) {
           s.World().AllReduce(a.view(), a.view(), oa);
           s.World().AllReduce(b.view(), b.view(), ob);
         } else {
           s.World().AllReduce(b.view(), b.view(), ob);
           s.World().AllReduce(a.view(), a.view(), oa);
         }
       },
       [](int n) {
         return std::vector<std::string>{"call order differs at operation 1 of communicator world",
                                         "rank 0 allreduce 'a' float32 [4] sum",
                                         Others(n) + " allreduce 'b' float32 [4] sum"};
       }},
      {"root",
       [](int rank, int, CollectiveService& s) {
         Buffer b(DType::kF32, 6);
         s.World().Broadcast(b.view(), rank, {"w", std::chrono::seconds(20)});
       },
       [](int) {
         return std::vector<std::string>{"broadcast 'w': mismatched root",
                                         "rank 0 float32 [6] root 0", "rank 1 float32 [6] root 1"};
       }},
      {"reduction",
       [](int rank, int, CollectiveService& s) {
         Buffer b(DType::kF64, 5);
         ReduceOptions o = Timed();
         o.op = rank == 0 ? Reduction::kMax : Reduction::kSum;
         s.World().AllReduce(b.view(), b.view(), o);
       },
       [](int n) {
         return std::vector<std::string>{"allreduce: mismatched reduction",
                                         "rank 0 float64 [5] max", Others(n) + " float64 [5] sum"};
       }},
      {"count_by_reference",
       // 20 000 int32 (80 000 bytes) travel by reference between threads.
       [](int rank, int, CollectiveService& s) {
         Buffer b(DType::kI32, rank == 0 ? 20000 : 20001);
         s.World().AllReduce(b.view(), b.view(), Timed());
       },
       [](int n) {
         return std::vector<std::string>{"allreduce: mismatched shape", "rank 0 int32 [20000]",
                                         Others(n) + " int32 [20001]"};
       }},
      {"empty_on_one_rank",
       [](int rank, int, CollectiveService& s) {
         Buffer b(DType::kF32, rank == 0 ? 0 : 3);
         s.World().AllReduce(b.view(), b.view(), Timed());
       },
       [](int n) {
         return std::vector<std::string>{"mismatched shape", "rank 0 float32 [0]",
                                         Others(n) + " float32 [3]"};
       }},
      {"allgather_trailing_dimension",
       [](int rank, int n, CollectiveService& s) {
         const int64_t cols = rank == 0 ? 3 : 4;
         std::vector<float> in(static_cast<size_t>(2 * cols)), out(in.size() * n);
         s.World().AllGather(TensorView{in.data(), DType::kF32, {2, cols}},
                             TensorView{out.data(), DType::kF32, {n * 2, cols}},
                             {"features", std::chrono::seconds(20)});
       },
       [](int n) {
         return std::vector<std::string>{"allgather 'features': mismatched shape",
                                         fmt::format("rank 0 float32 [{}, 3]", 2 * n),
                                         fmt::format("{} float32 [{}, 4]", Others(n), 2 * n)};
       }},
      {"allgatherv_empty_block",
       // Rank 0 gathers counts {3, 0, ...} (its own block empty on the
       // others), the others counts {3, 1, ...}: rank 1 contributes nothing
       // in rank 0's view, so only the check pieces of empty blocks reach it.
       [](int rank, int n, CollectiveService& s) {
         std::vector<int64_t> counts(static_cast<size_t>(n), rank == 0 ? 0 : 1);
         counts[0] = 3;
         int64_t total = 0;
         for (int64_t c : counts) total += c;
         Buffer in(DType::kF32, counts[static_cast<size_t>(rank)]), out(DType::kF32, total);
         s.World().AllGatherV(in.view(), out.view(), counts, {"v", std::chrono::seconds(20)});
       },
       [](int n) {
         return std::vector<std::string>{
             "allgather 'v': mismatched shape and counts", "rank 0 float32 [3] counts [3, 0",
             fmt::format("{} float32 [{}] counts [3, 1", Others(n), 2 + n)};
       }},
      {"alltoall_block",
       [](int rank, int n, CollectiveService& s) {
         Buffer in(DType::kI64, n * (rank == 0 ? 2 : 3)), out(DType::kI64, in.count);
         s.World().AllToAll(in.view(), out.view(), {"", std::chrono::seconds(20)});
       },
       [](int n) {
         return std::vector<std::string>{"alltoall: mismatched shape",
                                         fmt::format("rank 0 int64 [{}]", 2 * n),
                                         fmt::format("{} int64 [{}]", Others(n), 3 * n)};
       }},
      {"reduce_scatter_count",
       [](int rank, int n, CollectiveService& s) {
         const int64_t each = rank == 0 ? 2 : 5;
         Buffer in(DType::kF32, n * each), out(DType::kF32, each);
         s.World().ReduceScatter(in.view(), out.view(), Timed());
       },
       [](int n) {
         return std::vector<std::string>{"reduce_scatter: mismatched shape",
                                         fmt::format("rank 0 float32 [{}]", 2 * n),
                                         fmt::format("{} float32 [{}]", Others(n), 5 * n)};
       }},
      {"barrier_against_allreduce",
       [](int rank, int, CollectiveService& s) {
         if (rank == 0) {
           s.World().Barrier({"", std::chrono::seconds(20)});
         } else {
           Buffer b(DType::kF32, 1);
           s.World().AllReduce(b.view(), b.view(), Timed());
         }
       },
       [](int n) {
         return std::vector<std::string>{"call order differs", "rank 0 barrier",
                                         Others(n) + " allreduce float32 [1] sum"};
       }},
  };
}

class CallCheck : public ::testing::TestWithParam<std::tuple<size_t, int, bool>> {};

TEST_P(CallCheck, EveryRankRaisesNamingEachRanksCall) {
  // Not a structured binding: clang 14 cannot capture those in lambdas.
  const size_t index = std::get<0>(GetParam());
  const int n = std::get<1>(GetParam());
  const bool same_host = std::get<2>(GetParam());
  const Case c = Cases()[index];
  CollectiveJob job(n, TestSettings(testing::kTestPatience, 1, 64 << 10, same_host));
  std::vector<double> seconds(static_cast<size_t>(n));
  std::vector<int> returned(static_cast<size_t>(n), 0);
  auto errors = job.Run([&](int rank, CollectiveService& s) {
    s.World().Barrier();
    const auto start = Clock::now();
    try {
      c.call(rank, n, s);
      returned[static_cast<size_t>(rank)] = 1;
    } catch (...) {
      seconds[static_cast<size_t>(rank)] =
          std::chrono::duration<double>(Clock::now() - start).count();
      throw;
    }
  });
  const std::vector<std::string> says = c.says(n);
  for (int r = 0; r < n; ++r) {
    const auto& e = errors[static_cast<size_t>(r)];
    ASSERT_NE(e, nullptr) << c.name << ": rank " << r << " returned a result";
    EXPECT_EQ(returned[static_cast<size_t>(r)], 0);
    EXPECT_TRUE(Is<CallMismatch>(e)) << "rank " << r << ": " << What(e);
    for (const std::string& s : says) {
      EXPECT_NE(What(e).find(s), std::string::npos) << "rank " << r << " of " << n << " (" << c.name
                                                    << "): '" << s << "' not in: " << What(e);
    }
    // Far below the 20 s time-out: the mismatch is found, not waited out.
    EXPECT_LT(seconds[static_cast<size_t>(r)], 5.0) << "rank " << r << ": " << What(e);
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, CallCheck,
                         ::testing::Combine(::testing::Range(size_t{0}, Cases().size()),
                                            ::testing::Values(2, 3, 5), ::testing::Bool()),
                         [](const auto& info) {
                           return fmt::format("{}_{}ranks_{}",
                                              Cases()[std::get<0>(info.param)].name,
                                              std::get<1>(info.param),
                                              std::get<2>(info.param) ? "samehost" : "tcp");
                         });

// A sub-group used by only some of its members: workers 0 and 1 allreduce
// over the group {0, 1, 2} while worker 2 allreduces over the world. Each
// waits for the other's communicator; the crossed order is reported on
// every worker of both, well before the time-out, whichever algorithm the
// allreduces take (with recursive doubling at 4 workers no rank waits for
// a peer that sent it a piece of the other communicator: the crossing is
// found through a member the operation needs but does not wait for).
class CrossedGroups : public ::testing::TestWithParam<std::tuple<int, AllReduceAlgorithm>> {};

TEST_P(CrossedGroups, AMemberInAnotherCommunicatorIsReportedOnEveryRank) {
  const auto [n, algorithm] = GetParam();
  CollectiveJob job(n);
  ReduceOptions options = Timed();
  options.algorithm = algorithm;
  std::vector<double> seconds(static_cast<size_t>(n));
  auto errors = job.Run([&](int rank, CollectiveService& s) {
    std::unique_ptr<Communicator> group;
    if (rank < 3) group = s.NewGroup({0, 1, 2});
    s.World().Barrier();
    const auto start = Clock::now();
    Buffer b(DType::kF32, 8);
    try {
      if (rank < 2) {
        group->AllReduce(b.view(), b.view(), options);
      } else {
        s.World().AllReduce(b.view(), b.view(), options);
      }
    } catch (...) {
      seconds[static_cast<size_t>(rank)] =
          std::chrono::duration<double>(Clock::now() - start).count();
      throw;
    }
  });
  for (int r = 0; r < n; ++r) {
    const auto& e = errors[static_cast<size_t>(r)];
    ASSERT_NE(e, nullptr) << "rank " << r << " returned";
    EXPECT_TRUE(Is<CallMismatch>(e)) << "rank " << r << ": " << What(e);
    EXPECT_NE(What(e).find("the ranks call their communicators in different orders"),
              std::string::npos)
        << "rank " << r << ": " << What(e);
    EXPECT_LT(seconds[static_cast<size_t>(r)], 5.0) << "rank " << r << ": " << What(e);
  }
  // Whoever found it names both communicators; the others repeat its words.
  for (int r = 0; r < n; ++r) {
    const std::string what = What(errors[static_cast<size_t>(r)]);
    EXPECT_NE(what.find("communicator group [0, 1, 2]"), std::string::npos) << what;
    EXPECT_NE(what.find("communicator world"), std::string::npos) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(
    WorkersAndAlgorithms, CrossedGroups,
    ::testing::Combine(::testing::Values(3, 4, 6),
                       ::testing::Values(AllReduceAlgorithm::kDirect, AllReduceAlgorithm::kRing,
                                         AllReduceAlgorithm::kHalvingDoubling,
                                         AllReduceAlgorithm::kRecursiveDoubling)),
    [](const auto& p) {
      return fmt::format("{}workers_{}", std::get<0>(p.param),
                         AllReduceAlgorithmName(std::get<1>(p.param)));
    });

// Not a crossing: worker 1 queues an allreduce over Y, computes for a
// second (its caller is not blocked), then allreduces over X; worker 0
// allreduces over X, then over Y. Each communicator sees the same order on
// both, so both succeed, although worker 0 waits in X for a second while
// worker 1's Y pieces wait for it.
TEST(CrossedGroups, AnAsynchronousCallerThatGoesOnIsNotACrossing) {
  CollectiveJob job(2);
  job.RunOk([&](int rank, CollectiveService& s) {
    auto x = s.NewGroup({0, 1});
    auto y = s.NewGroup({0, 1});
    s.World().Barrier();
    Buffer bx(DType::kF32, 8), by(DType::kF32, 8);
    for (int64_t k = 0; k < 8; ++k) bx.Set(k, rank + 1), by.Set(k, 10 * (rank + 1));
    if (rank == 1) {
      CollectiveHandle h = y->AllReduceAsync(by.view(), by.view(), Timed());
      std::this_thread::sleep_for(std::chrono::seconds(1));
      x->AllReduce(bx.view(), bx.view(), Timed());
      h.Wait();
    } else {
      x->AllReduce(bx.view(), bx.view(), Timed());
      y->AllReduce(by.view(), by.view(), Timed());
    }
    for (int64_t k = 0; k < 8; ++k) {
      ASSERT_EQ(bx.Get(k), 3.0);
      ASSERT_EQ(by.Get(k), 30.0);
    }
  });
}

// Ranks that agree are not slowed or refused by the checks: many calls of
// every kind, names and dtypes varying per call but alike across ranks.
TEST(CallCheck, AgreeingCallsPass) {
  CollectiveJob job(3);
  job.RunOk([&](int rank, CollectiveService& s) {
    for (int i = 0; i < 20; ++i) {
      Buffer b(i % 2 ? DType::kF32 : DType::kI64, i);
      for (int64_t k = 0; k < b.count; ++k) b.Set(k, rank + 1);
      ReduceOptions o = Timed();
      o.name = fmt::format("t{}", i);
      s.World().AllReduce(b.view(), b.view(), o);
      for (int64_t k = 0; k < b.count; ++k) ASSERT_EQ(b.Get(k), 6.0);
      s.World().Broadcast(b.view(), i % 3, {o.name, std::chrono::seconds(20)});
    }
    s.World().Barrier();
  });
}

// Descriptions and their fingerprints (no network).
TEST(CallDescription, FingerprintCoversTheCallButNotTheShape) {
  CallDescription a;
  a.kind = CallKind::kAllReduce;
  a.dtype = DType::kF32;
  a.count = 10;
  a.name = "w";
  a.shape = {2, 5};
  CallDescription b = a;
  b.shape = {10};
  EXPECT_EQ(a.Fingerprint(), b.Fingerprint());
  for (auto change : std::vector<std::function<void(CallDescription&)>>{
           [](CallDescription& d) { d.dtype = DType::kI32; },
           [](CallDescription& d) { d.count = 11; }, [](CallDescription& d) { d.name = "v"; },
           [](CallDescription& d) { d.reduction = 3; }, [](CallDescription& d) { d.root = 1; },
           [](CallDescription& d) { d.algorithm = 2; },
           [](CallDescription& d) { d.segment_bytes = 4096; },
           [](CallDescription& d) { d.postscale = 0.5; },
           [](CallDescription& d) {
             d.counts = {1, 2};
           },
           [](CallDescription& d) { d.kind = CallKind::kBroadcast; },
           // Differences only in a word's high bits, a sign, an order.
           [](CallDescription& d) { d.count += uint64_t{1} << 63; },
           [](CallDescription& d) { d.segment_bytes = uint64_t{1} << 56; },
           [](CallDescription& d) { d.prescale = -1.0; }, [](CallDescription& d) { d.root = -2; },
           [](CallDescription& d) { d.name = "w "; },
           [](CallDescription& d) {
             d.counts = {2, 1};
           }}) {
    CallDescription c = a;
    change(c);
    EXPECT_NE(c.Fingerprint(), a.Fingerprint()) << c.Summary();
  }
  // The fingerprint is on the wire (docs/protocol-collective.md): ranks of
  // different builds must compute the same one.
  EXPECT_EQ(a.Fingerprint(), 0x291788bf27cfe3a1ULL);
  const CallDescription back = CallDescription::Decode(a.Encode());
  EXPECT_EQ(back.Encode(), a.Encode());
  EXPECT_EQ(back.Summary(), "allreduce 'w' float32 [2, 5] sum");
}

TEST(CallDescription, EncodingIntoAReusedBufferLeavesNothingOfTheLastCall) {
  CallDescription big;
  big.kind = CallKind::kAllGather;
  big.counts = {1, 2, 3, 4};
  big.name = std::string(300, 'x');
  big.shape = {10};
  CallDescription small;
  small.kind = CallKind::kAllReduce;
  small.dtype = DType::kF64;
  small.count = 7;
  std::string buffer;
  EXPECT_EQ(big.EncodeInto(buffer), big.Fingerprint());
  EXPECT_EQ(buffer, big.Encode());
  const size_t capacity = buffer.capacity();
  EXPECT_EQ(small.EncodeInto(buffer), small.Fingerprint());
  EXPECT_EQ(buffer, small.Encode());
  EXPECT_EQ(buffer.capacity(), capacity);  // kept, not reallocated
  EXPECT_EQ(CallDescription::Decode(buffer).Summary(), small.Summary());
}

TEST(CallDescription, DecoderRefusesWhatItCannotTrust) {
  CallDescription a;
  a.kind = CallKind::kAllGather;
  a.counts = {1, 2, 3};
  std::string bytes = a.Encode();
  EXPECT_THROW(CallDescription::Decode(bytes.substr(0, bytes.size() - 1)), ProtocolError);
  EXPECT_THROW(CallDescription::Decode(bytes + "x"), ProtocolError);
  std::string bad_kind = bytes;
  bad_kind[0] = 9;
  EXPECT_THROW(CallDescription::Decode(bad_kind), ProtocolError);
  // A member count far beyond the bytes that follow.
  std::string huge = bytes;
  const uint32_t claim = 1u << 19;
  std::memcpy(huge.data() + 40, &claim, 4);
  try {
    CallDescription::Decode(huge);
    FAIL() << "a claim of 2^19 counts was accepted";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("counts claims 524288"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::collective
