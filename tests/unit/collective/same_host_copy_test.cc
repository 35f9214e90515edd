// The same-host copy (docs/collectives.md, "Same-host copy"): workers that
// can read each other's memory exchange pieces larger than 32 KiB by
// reference, and the receiver copies them out of the sender. The workers of
// these tests are threads of one process, so every pair can; with the copy
// turned off every piece travels as bytes. Both ways give the exact results,
// and the probe is what decides. With the mailbox (the default) the small
// pieces and the references' messages go through the peers' shared rings;
// a full ring sends over TCP instead. (A piece of the wrong size by reference:
// collective_failure_test.cc, CollectiveMismatch.)
#include <gtest/gtest.h>

#include <numeric>
#include <thread>

#include "base/config.h"
#include "base/environment.h"
#include "collective_job.h"

namespace tandem::collective {
namespace {

using testing::Buffer;
using testing::CollectiveJob;

class SameHostCopy : public ::testing::TestWithParam<std::tuple<int, bool, bool>> {};

TEST_P(SameHostCopy, EveryOperationGivesExactResultsEitherWay) {
  const auto [n, copy, mailbox] = GetParam();
  CollectiveSettings settings = testing::TestSettings(testing::kTestPatience, 1, 256 << 10, copy);
  settings.mesh.mailbox = mailbox;
  CollectiveJob job(n, settings);
  job.RunOk([&, n = n, copy = copy, mailbox = mailbox](int rank, CollectiveService& s) {
    // Every pair probed the other: all peers or none, both ways.
    const auto [out, in] = s.mesh().SameHostPeers();
    EXPECT_EQ(out, copy ? n - 1 : 0);
    EXPECT_EQ(in, copy ? n - 1 : 0);
    EXPECT_EQ(s.mesh().MailboxPeers(), copy && mailbox ? n - 1 : 0);
    Communicator& world = s.World();
    // Small pieces: allreduces of 0, 1 and 1001 int64 (direct), a barrier.
    for (int64_t count : {0, 1, 1001}) {
      Buffer b(DType::kI64, count);
      for (int64_t i = 0; i < count; ++i) b.Set(i, static_cast<double>(i * (rank + 1)));
      world.AllReduce(b.view(), b.view(), {});
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(b.Get(i), static_cast<double>(i * n * (n + 1) / 2)) << count << " " << i;
      }
      world.Barrier();
    }
    // Allreduce, 1 MiB + 1 element of integer-valued floats, two algorithms.
    for (AllReduceAlgorithm a : {AllReduceAlgorithm::kRing, AllReduceAlgorithm::kHalvingDoubling}) {
      const int64_t count = (1 << 18) + 1;
      Buffer b(DType::kF32, count);
      for (int64_t i = 0; i < count; ++i) b.Set(i, static_cast<double>((i % 977) * (rank + 1)));
      ReduceOptions o;
      o.algorithm = a;
      world.AllReduce(b.view(), b.view(), o);
      const double ranks = n * (n + 1) / 2.0;
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(b.Get(i), static_cast<double>(i % 977) * ranks)
            << AllReduceAlgorithmName(a) << " element " << i;
      }
    }
    // Broadcast of 200 001 int64 from the last rank.
    {
      const int64_t count = 200001;
      Buffer b(DType::kI64, count);
      for (int64_t i = 0; i < count; ++i) b.Set(i, rank == n - 1 ? static_cast<double>(i * 3) : -1);
      world.Broadcast(b.view(), n - 1);
      for (int64_t i = 0; i < count; ++i) ASSERT_EQ(b.Get(i), static_cast<double>(i * 3)) << i;
    }
    // Allgather of 50 001 int32 a rank.
    {
      const int64_t per = 50001;
      Buffer in_b(DType::kI32, per);
      for (int64_t i = 0; i < per; ++i) in_b.Set(i, static_cast<double>(rank * 1000003 + i));
      Buffer out_b(DType::kI32, per * n);
      world.AllGather(in_b.view(), out_b.view());
      for (int r = 0; r < n; ++r) {
        for (int64_t i = 0; i < per; i += 97) {
          ASSERT_EQ(out_b.Get(r * per + i), static_cast<double>(r * 1000003 + i)) << r << " " << i;
        }
      }
    }
    // All-to-all, 20 000 int32 a block.
    {
      const int64_t per = 20000;
      Buffer in_b(DType::kI32, per * n);
      for (int64_t i = 0; i < per * n; ++i) in_b.Set(i, static_cast<double>(rank * 10000000 + i));
      Buffer out_b(DType::kI32, per * n);
      world.AllToAll(in_b.view(), out_b.view());
      for (int r = 0; r < n; ++r) {
        // Block r of the output is block `rank` of rank r's input.
        for (int64_t i = 0; i < per; i += 101) {
          ASSERT_EQ(out_b.Get(r * per + i), static_cast<double>(r * 10000000 + rank * per + i));
        }
      }
    }
  });
}

std::string CaseName(const ::testing::TestParamInfo<SameHostCopy::ParamType>& p) {
  return fmt::format("n{}_{}{}", std::get<0>(p.param), std::get<1>(p.param) ? "copy" : "bytes",
                     std::get<2>(p.param) ? "_mailbox" : "");
}

INSTANTIATE_TEST_SUITE_P(GroupsCopyOnAndOff, SameHostCopy,
                         ::testing::Combine(::testing::Values(2, 3, 5), ::testing::Bool(),
                                            ::testing::Bool()),
                         CaseName);

// A rank far ahead fills its peer's ring: twelve communicators each send a
// 32 KiB piece (384 KiB, the ring holds 256 KiB) while the peer has not
// started; the records that find the ring full go over TCP, and every
// result is exact.
TEST(SameHostMailboxFull, RecordsThatDoNotFitGoOverTcp) {
  constexpr int kGroups = 12;
  constexpr int64_t kCount = (32 << 10) / 4;
  CollectiveJob job(2, testing::TestSettings(testing::kTestPatience));
  job.RunOk([&](int rank, CollectiveService& s) {
    ASSERT_EQ(s.mesh().MailboxPeers(), 1);
    std::vector<std::unique_ptr<Communicator>> groups;
    for (int g = 0; g < kGroups; ++g) groups.push_back(s.NewGroup({0, 1}));
    std::vector<Buffer> bufs;
    for (int g = 0; g < kGroups; ++g) {
      bufs.emplace_back(DType::kF32, kCount);
      for (int64_t i = 0; i < kCount; ++i)
        bufs.back().Set(i, static_cast<double>(g + i % 100 * (rank + 1)));
    }
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ReduceOptions o;
    o.algorithm = AllReduceAlgorithm::kDirect;
    std::vector<CollectiveHandle> handles;
    for (int g = 0; g < kGroups; ++g) {
      handles.push_back(groups[static_cast<size_t>(g)]->AllReduceAsync(
          bufs[static_cast<size_t>(g)].view(), bufs[static_cast<size_t>(g)].view(), o));
    }
    for (auto& h : handles) h.Wait();
    for (int g = 0; g < kGroups; ++g) {
      for (int64_t i = 0; i < kCount; ++i) {
        ASSERT_EQ(bufs[static_cast<size_t>(g)].Get(i), static_cast<double>(2 * g + i % 100 * 3))
            << g << " " << i;
      }
    }
    if (rank == 0) {
      EXPECT_GT(s.mesh().MailboxFullCount(), 0u);
    }
  });
}

// TANDEM_COLLECTIVE_SAME_HOST_COPY=host: the copy (and the mailbox) only
// with workers that announced this worker's host address. 6 workers on 3
// hosts of 2, all in one process (each could read every other): each
// reads its host-mate only, and a hierarchical allreduce (stages on each
// host by the copy, across hosts over TCP) stays exact.
TEST(SameHostCopyByAddress, OnlyWorkersThatAnnouncedTheSameHostCopy) {
  const base::Config config = base::Config::FromEnvironment(base::Environment());
  CollectiveSettings settings =
      CollectiveSettings::FromEnvironment(base::Environment(std::map<std::string, std::string>{
                                              {"TANDEM_COLLECTIVE_SAME_HOST_COPY", "host"},
                                              {"TANDEM_COLLECTIVE_SEGMENT_BYTES", "65536"}}),
                                          config);
  ASSERT_TRUE(settings.mesh.same_host_copy);
  ASSERT_TRUE(settings.mesh.copy_same_address_only);
  settings.mesh.connect_timeout = std::chrono::seconds(10);
  settings.communicator.timeout = std::chrono::seconds(20);
  constexpr int kRanks = 6;
  CollectiveJob job(kRanks, settings, {}, /*per_host=*/2);
  job.RunOk([&](int rank, CollectiveService& s) {
    const auto [out, in] = s.mesh().SameHostPeers();
    EXPECT_EQ(out, 1) << "rank " << rank;
    EXPECT_EQ(in, 1) << "rank " << rank;
    EXPECT_EQ(s.mesh().MailboxPeers(), 1) << "rank " << rank;
    const int64_t count = (1 << 20) + 3;
    Buffer b(DType::kF32, count);
    for (int64_t i = 0; i < count; ++i) b.Set(i, static_cast<double>((i % 500) * (rank + 1)));
    ReduceOptions o;
    o.algorithm = AllReduceAlgorithm::kHierarchical;
    s.World().AllReduce(b.view(), b.view(), o);
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_EQ(b.Get(i), static_cast<double>((i % 500) * kRanks * (kRanks + 1) / 2)) << i;
    }
  });
  EXPECT_THROW(
      CollectiveSettings::FromEnvironment(base::Environment(std::map<std::string, std::string>{
                                              {"TANDEM_COLLECTIVE_SAME_HOST_COPY", "hosts"}}),
                                          config),
      ConfigError);
}

// The pipelining segment: TANDEM_COLLECTIVE_SEGMENT_BYTES when set, else
// chosen per communicator by placement (1 MiB on one host, 256 KiB across
// hosts; the workers of CollectiveJob announce different hosts).
TEST(SegmentByPlacement, TheVariableWinsElseThePlacementDecides) {
  const base::Config config = base::Config::FromEnvironment(base::Environment());
  auto unset = CollectiveSettings::FromEnvironment(base::Environment(), config);
  EXPECT_TRUE(unset.communicator.segment_by_placement);
  auto set = CollectiveSettings::FromEnvironment(
      base::Environment({{"TANDEM_COLLECTIVE_SEGMENT_BYTES", "65536"},
                         {"TANDEM_COLLECTIVE_SAME_HOST_COPY", "0"}}),
      config);
  EXPECT_FALSE(set.communicator.segment_by_placement);
  EXPECT_EQ(set.communicator.segment_bytes, 65536u);
  EXPECT_FALSE(set.mesh.same_host_copy);
  EXPECT_THROW(
      CollectiveSettings::FromEnvironment(base::Environment(std::map<std::string, std::string>{
                                              {"TANDEM_COLLECTIVE_SAME_HOST_COPY", "2"}}),
                                          config),
      ConfigError);

  // By placement, over hosts that differ: 256 KiB segments, exact results.
  CollectiveSettings settings = testing::TestSettings();
  settings.communicator.segment_by_placement = true;
  CollectiveJob job(3, settings);
  job.RunOk([&](int rank, CollectiveService& s) {
    const int64_t count = (3 << 20) / 4 + 7;
    Buffer b(DType::kF32, count);
    for (int64_t i = 0; i < count; ++i) b.Set(i, static_cast<double>((i % 500) * (rank + 1)));
    ReduceOptions o;
    o.algorithm = AllReduceAlgorithm::kRing;
    s.World().AllReduce(b.view(), b.view(), o);
    for (int64_t i = 0; i < count; ++i) ASSERT_EQ(b.Get(i), static_cast<double>((i % 500) * 6));
  });
}

// TANDEM_COLLECTIVE_MAILBOX and TANDEM_COLLECTIVE_SPIN_US: the mailbox is on
// unless 0; the polling is the mailbox default unless the variable is set.
TEST(MailboxSettings, TheVariablesAreReadAndCheckedElseTheDefaultsHold) {
  const base::Config config = base::Config::FromEnvironment(base::Environment());
  auto defaults = CollectiveSettings::FromEnvironment(base::Environment(), config);
  EXPECT_TRUE(defaults.mesh.mailbox);
  EXPECT_FALSE(defaults.mesh.spin.has_value());
  auto set = CollectiveSettings::FromEnvironment(
      base::Environment({{"TANDEM_COLLECTIVE_MAILBOX", "0"}, {"TANDEM_COLLECTIVE_SPIN_US", "0"}}),
      config);
  EXPECT_FALSE(set.mesh.mailbox);
  ASSERT_TRUE(set.mesh.spin.has_value());
  EXPECT_EQ(set.mesh.spin->count(), 0);
  for (const char* bad : {"2", "yes"}) {
    EXPECT_THROW(
        CollectiveSettings::FromEnvironment(base::Environment(std::map<std::string, std::string>{
                                                {"TANDEM_COLLECTIVE_MAILBOX", bad}}),
                                            config),
        ConfigError)
        << bad;
  }
}

}  // namespace
}  // namespace tandem::collective
