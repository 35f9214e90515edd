// Broadcast (every root), AllGather and AllGatherV, ReduceScatter, AllToAll,
// Barrier, asynchronous handles and sub-groups over groups of 1..8 worker
// threads. Inputs are chosen so every expected value is exact: the checks
// are equalities.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "collective_job.h"

namespace tandem::collective {
namespace {

using testing::Buffer;
using testing::CollectiveJob;

constexpr DType kDTypes[] = {DType::kF32,  DType::kF64, DType::kF16,
                             DType::kBF16, DType::kI32, DType::kI64};
constexpr int64_t kCounts[] = {0, 1, 5, 1031, 70001};

// An element value exact in every dtype (integers up to 255 fit bfloat16).
double Value(int r, int64_t i) { return static_cast<double>((i * 7 + r * 11) % 251) - 120.0; }

class CollectiveOps : public ::testing::TestWithParam<int> {};

TEST_P(CollectiveOps, BroadcastFromEveryRoot) {
  const int n = GetParam();
  CollectiveJob job(n);
  job.RunOk([&](int rank, CollectiveService& s) {
    for (DType dtype : kDTypes) {
      for (int64_t count : kCounts) {
        for (int root = 0; root < n; ++root) {
          Buffer b(dtype, count);
          for (int64_t i = 0; i < count; ++i) b.Set(i, rank == root ? Value(root, i) : -1.0);
          s.World().Broadcast(b.view(), root, {"bcast", {}});
          for (int64_t i = 0; i < count; ++i) {
            ASSERT_EQ(b.Get(i), Value(root, i))
                << base::DTypeName(dtype) << " count " << count << " root " << root << " i " << i;
          }
        }
      }
    }
  });
}

TEST_P(CollectiveOps, AllGatherInAndOutOfPlace) {
  const int n = GetParam();
  CollectiveJob job(n);
  job.RunOk([&](int rank, CollectiveService& s) {
    for (DType dtype : kDTypes) {
      for (int64_t count : kCounts) {
        Buffer in(dtype, count), out(dtype, count * n), out2(dtype, count * n);
        for (int64_t i = 0; i < count; ++i) {
          in.Set(i, Value(rank, i));
          out2.Set(rank * count + i, Value(rank, i));
        }
        s.World().AllGather(in.view(), out.view());
        // In place: this rank's block of the output is the input.
        TensorView own{out2.bytes.data() + static_cast<size_t>(rank * count) * ElementSize(dtype),
                       dtype,
                       {count}};
        if (count == 0) own.data = nullptr;
        s.World().AllGather(own, out2.view());
        for (int r = 0; r < n; ++r) {
          for (int64_t i = 0; i < count; ++i) {
            ASSERT_EQ(out.Get(r * count + i), Value(r, i)) << base::DTypeName(dtype) << " r " << r;
            ASSERT_EQ(out2.Get(r * count + i), Value(r, i)) << "in place, r " << r;
          }
        }
      }
    }
  });
}

TEST_P(CollectiveOps, AllGatherVWithUnequalCounts) {
  const int n = GetParam();
  CollectiveJob job(n);
  job.RunOk([&](int rank, CollectiveService& s) {
    std::vector<int64_t> counts;
    int64_t total = 0;
    for (int r = 0; r < n; ++r) {
      counts.push_back(r % 3 == 1 ? 0 : 1000 * r + 3);  // some ranks contribute nothing
      total += counts.back();
    }
    Buffer in(DType::kI64, counts[static_cast<size_t>(rank)]), out(DType::kI64, total);
    for (int64_t i = 0; i < in.count; ++i) in.Set(i, Value(rank, i));
    s.World().AllGatherV(in.view(), out.view(), counts);
    int64_t at = 0;
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < counts[static_cast<size_t>(r)]; ++i) {
        ASSERT_EQ(out.Get(at + i), Value(r, i)) << "block " << r << " element " << i;
      }
      at += counts[static_cast<size_t>(r)];
    }
  });
}

TEST_P(CollectiveOps, ReduceScatterSumAndMax) {
  const int n = GetParam();
  CollectiveJob job(n);
  job.RunOk([&](int rank, CollectiveService& s) {
    for (DType dtype : kDTypes) {
      for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{5001}}) {
        Buffer in(dtype, count * n), out(dtype, count);
        for (int64_t i = 0; i < count * n; ++i) in.Set(i, static_cast<double>(i % 10 + rank));
        ReduceOptions o;
        o.name = "rs";
        s.World().ReduceScatter(in.view(), out.view(), o);
        for (int64_t i = 0; i < count; ++i) {
          const int64_t g = rank * count + i;
          ASSERT_EQ(out.Get(i), static_cast<double>(n * (g % 10) + n * (n - 1) / 2))
              << base::DTypeName(dtype) << " count " << count << " i " << i;
        }
        o.op = Reduction::kMax;
        s.World().ReduceScatter(in.view(), out.view(), o);
        for (int64_t i = 0; i < count; ++i) {
          const int64_t g = rank * count + i;
          ASSERT_EQ(out.Get(i), static_cast<double>(g % 10 + n - 1)) << "max, i " << i;
        }
      }
    }
  });
}

TEST_P(CollectiveOps, AllToAllMovesEveryBlock) {
  const int n = GetParam();
  CollectiveJob job(n);
  job.RunOk([&](int rank, CollectiveService& s) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64}) {
      for (int64_t block : {int64_t{0}, int64_t{1}, int64_t{333}}) {
        Buffer in(dtype, block * n), out(dtype, block * n);
        // Block j of rank r holds 10 r + j (+ i % 3).
        for (int j = 0; j < n; ++j) {
          for (int64_t i = 0; i < block; ++i) in.Set(j * block + i, 10.0 * rank + j + i % 3);
        }
        s.World().AllToAll(in.view(), out.view());
        for (int j = 0; j < n; ++j) {
          for (int64_t i = 0; i < block; ++i) {
            ASSERT_EQ(out.Get(j * block + i), 10.0 * j + rank + static_cast<double>(i % 3));
          }
        }
      }
    }
  });
}

TEST_P(CollectiveOps, BarrierHoldsEveryoneUntilTheLastArrives) {
  const int n = GetParam();
  CollectiveJob job(n);
  std::atomic<int> arrived{0};
  job.RunOk([&](int rank, CollectiveService& s) {
    for (int round = 1; round <= 5; ++round) {
      if (rank == round % n) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      arrived++;
      s.World().Barrier();
      // Nobody leaves round k before all n arrived in it.
      EXPECT_GE(arrived.load(), round * n) << "rank " << rank << " round " << round;
      s.World().Barrier();
    }
  });
}

TEST_P(CollectiveOps, AsynchronousOperationsCompleteInOrder) {
  const int n = GetParam();
  CollectiveJob job(n);
  job.RunOk([&](int rank, CollectiveService& s) {
    std::vector<Buffer> bufs;
    for (int k = 0; k < 20; ++k) {
      bufs.emplace_back(DType::kI32, 1000 + k);
      for (int64_t i = 0; i < 1000 + k; ++i) bufs.back().Set(i, k + rank);
    }
    std::vector<CollectiveHandle> handles;
    for (auto& b : bufs) handles.push_back(s.World().AllReduceAsync(b.view(), b.view()));
    for (auto& h : handles) h.Wait();
    for (int k = 0; k < 20; ++k) {
      EXPECT_TRUE(handles[static_cast<size_t>(k)].Done());
      ASSERT_EQ(bufs[static_cast<size_t>(k)].Get(999), n * k + n * (n - 1) / 2) << "op " << k;
    }
  });
}

TEST_P(CollectiveOps, SubGroupsRunSideBySide) {
  const int n = GetParam();
  CollectiveJob job(n);
  job.RunOk([&](int rank, CollectiveService& s) {
    // Evens and odds, each its own group, in reverse rank order for the
    // odds (group rank i = members[i]).
    std::vector<int> members;
    for (int r = 0; r < n; ++r) {
      if (r % 2 == rank % 2) members.push_back(r);
    }
    if (rank % 2 == 1) std::reverse(members.begin(), members.end());
    auto group = s.NewGroup(members);
    const int expect_rank =
        static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
    EXPECT_EQ(group->rank(), expect_rank);
    int64_t sum = 0;
    for (int m : members) sum += m;
    for (int k = 0; k < 3; ++k) {
      Buffer b(DType::kI64, 10001);
      for (int64_t i = 0; i < b.count; ++i) b.Set(i, rank);
      group->AllReduce(b.view(), b.view());
      ASSERT_EQ(b.Get(10000), static_cast<double>(sum));
      // Interleaved with the world, which still works.
      Buffer w(DType::kI32, 3);
      for (int64_t i = 0; i < 3; ++i) w.Set(i, 1);
      s.World().AllReduce(w.view(), w.view());
      ASSERT_EQ(w.Get(2), n);
      Buffer g(DType::kF32, 4);
      for (int64_t i = 0; i < 4; ++i) g.Set(i, group->rank() == 0 ? 42.0 : 0.0);
      group->Broadcast(g.view(), 0);
      ASSERT_EQ(g.Get(3), 42.0);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Groups, CollectiveOps, ::testing::Range(1, 9),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

class ConnectionsPerPair : public ::testing::TestWithParam<int> {};

TEST_P(ConnectionsPerPair, SeveralConnectionsCarryTheSameResults) {
  CollectiveJob job(4, testing::TestSettings(testing::kTestPatience, GetParam(), 4096));
  job.RunOk([&](int rank, CollectiveService& s) {
    Buffer b(DType::kI32, 100003);
    for (int64_t i = 0; i < b.count; ++i) b.Set(i, static_cast<double>(i % 100 + rank));
    ReduceOptions o;
    o.algorithm = AllReduceAlgorithm::kRing;
    s.World().AllReduce(b.view(), b.view(), o);
    for (int64_t i = 0; i < b.count; ++i) ASSERT_EQ(b.Get(i), 4.0 * (i % 100) + 6);
  });
}

INSTANTIATE_TEST_SUITE_P(Connections, ConnectionsPerPair, ::testing::Values(1, 2, 4));

}  // namespace
}  // namespace tandem::collective
