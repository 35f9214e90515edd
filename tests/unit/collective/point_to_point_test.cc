// Point-to-point messages (docs/collectives.md, "Point-to-point"): every
// pair's messages meet in call order per tag, whichever side comes first,
// by TCP, through the mailbox or by reference; a receive from any rank says
// whose message it took; messages do not wait behind the queued collective
// operations; bad calls, sizes that differ and timeouts fail with errors
// that name the operation and the rank.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "collective_job.h"

namespace tandem::collective {
namespace {

using testing::Buffer;
using testing::CollectiveJob;
using Clock = std::chrono::steady_clock;

// The value of element i of the k-th message from rank `from` to rank `to`.
double Value(int from, int to, int k, int64_t i) { return from * 1000 + to * 100 + k * 10 + i % 7; }

// Group size, same-host copy, mailbox, elements per message (4 bytes: the
// mailbox or a copied TCP message; 100000: by reference or zero-copy TCP).
class PointToPoint : public ::testing::TestWithParam<std::tuple<int, bool, bool, int64_t>> {};

// The job of a parameter set: its size and paths.
std::unique_ptr<CollectiveJob> JobFor(const std::tuple<int, bool, bool, int64_t>& param) {
  CollectiveSettings settings =
      testing::TestSettings(testing::kTestPatience, 1, 64 << 10, std::get<1>(param));
  settings.mesh.mailbox = std::get<2>(param);
  return std::make_unique<CollectiveJob>(std::get<0>(param), settings);
}

TEST_P(PointToPoint, EveryPairsMessagesMeetInOrderPerTag) {
  const auto [n, copy, mailbox, count] = GetParam();
  JobFor(GetParam())->RunOk([&, n = n, count = count](int rank, CollectiveService& s) {
    Communicator& world = s.World();
    // To every other rank: three messages with tag 7, then one with tag 9.
    std::vector<Buffer> out;
    std::vector<CollectiveHandle> sends;
    out.reserve(static_cast<size_t>(4 * n));
    for (int to = 0; to < n; ++to) {
      if (to == rank) continue;
      for (int k = 0; k < 4; ++k) {
        Buffer& b = out.emplace_back(DType::kF32, count);
        for (int64_t i = 0; i < count; ++i) b.Set(i, Value(rank, to, k, i));
        sends.push_back(world.SendAsync(b.view(), to, k < 3 ? 7 : 9));
      }
    }
    // Received in another order: tag 9 first (it arrives after the tag 7
    // ones), then the tag 7 ones, whose order must hold.
    for (int from = 0; from < n; ++from) {
      if (from == rank) continue;
      Buffer last(DType::kF32, count);
      world.Recv(last.view(), from, 9);
      for (int64_t i = 0; i < count; ++i) ASSERT_EQ(last.Get(i), Value(from, rank, 3, i));
      for (int k = 0; k < 3; ++k) {
        Buffer b(DType::kF32, count);
        CollectiveHandle h = world.RecvAsync(b.view(), from, 7);
        h.Wait();
        EXPECT_EQ(h.Source(), from);
        for (int64_t i = 0; i < count; ++i) {
          ASSERT_EQ(b.Get(i), Value(from, rank, k, i)) << "from " << from << " message " << k;
        }
      }
    }
    for (auto& h : sends) h.Wait();
    // Collectives still agree afterwards.
    Buffer one(DType::kF32, 1);
    one.Set(0, 1);
    world.AllReduce(one.view(), one.view());
    EXPECT_EQ(one.Get(0), n);
  });
}

TEST_P(PointToPoint, AnySourceTakesEachSenderOnce) {
  const auto [n, copy, mailbox, count] = GetParam();
  JobFor(GetParam())->RunOk([&, n = n, count = count](int rank, CollectiveService& s) {
    Communicator& world = s.World();
    if (rank != 0) {
      Buffer b(DType::kI64, count);
      for (int64_t i = 0; i < count; ++i) b.Set(i, rank * 100 + i % 50);
      world.Send(b.view(), 0, 3);
      return;
    }
    std::vector<Buffer> in;
    std::vector<CollectiveHandle> recvs;
    in.reserve(static_cast<size_t>(n));
    for (int k = 1; k < n; ++k) {
      recvs.push_back(
          world.RecvAsync(in.emplace_back(DType::kI64, count).view(), Communicator::kAnySource, 3));
    }
    std::set<int> sources;
    for (size_t k = 0; k < recvs.size(); ++k) {
      recvs[k].Wait();
      const int from = recvs[k].Source();
      EXPECT_TRUE(sources.insert(from).second) << "rank " << from << " taken twice";
      for (int64_t i = 0; i < count; ++i) ASSERT_EQ(in[k].Get(i), from * 100 + i % 50);
    }
    std::set<int> want;
    for (int r = 1; r < n; ++r) want.insert(r);
    EXPECT_EQ(sources, want);
  });
}

INSTANTIATE_TEST_SUITE_P(GroupsAndPaths, PointToPoint,
                         ::testing::Values(std::make_tuple(2, true, true, int64_t{1}),
                                           std::make_tuple(2, true, true, int64_t{100000}),
                                           std::make_tuple(3, true, false, int64_t{1}),
                                           std::make_tuple(3, true, false, int64_t{100000}),
                                           std::make_tuple(4, false, false, int64_t{1}),
                                           std::make_tuple(4, false, false, int64_t{100000}),
                                           std::make_tuple(2, false, false, int64_t{0})),
                         [](const auto& param) {
                           return fmt::format(
                               "n{}_copy{}_mailbox{}_{}elements", std::get<0>(param.param),
                               std::get<1>(param.param) ? 1 : 0, std::get<2>(param.param) ? 1 : 0,
                               std::get<3>(param.param));
                         });

// A receive waits while a collective of the same communicator runs and
// completes behind it: messages bypass the queue. Rank 0 posts its receive,
// then joins an allreduce; rank 1 sends only after that allreduce.
TEST(PointToPointQueue, AReceiveDoesNotHoldUpCollectives) {
  CollectiveJob job(2);
  job.RunOk([&](int rank, CollectiveService& s) {
    Communicator& world = s.World();
    Buffer msg(DType::kF64, 3);
    Buffer sum(DType::kF64, 1);
    sum.Set(0, rank + 1);
    if (rank == 0) {
      CollectiveHandle h = world.RecvAsync(msg.view(), 1, 0);
      world.AllReduce(sum.view(), sum.view());
      h.Wait();
      EXPECT_EQ(msg.Get(0), 1.5);
      EXPECT_EQ(msg.Get(2), 3.5);
    } else {
      world.AllReduce(sum.view(), sum.view());
      for (int i = 0; i < 3; ++i) msg.Set(i, 1.5 + i);
      world.Send(msg.view(), 0, 0);
    }
    EXPECT_EQ(sum.Get(0), 3);
  });
}

TEST(PointToPointErrors, BadRanksAreRefusedNamingTheRank) {
  CollectiveJob job(2);
  job.RunOk([&](int rank, CollectiveService& s) {
    Communicator& world = s.World();
    Buffer b(DType::kF32, 4);
    CollectiveOptions o;
    o.name = "activations";
    for (int bad : {rank, 2, -3}) {
      try {
        world.Send(b.view(), bad, 0, o);
        ADD_FAILURE() << "a send to rank " << bad << " was accepted";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(bad)), std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("Send of 'activations'"), std::string::npos)
            << e.what();
      }
    }
    EXPECT_THROW(world.Recv(b.view(), rank, 0), InvalidArgument);
    EXPECT_THROW(world.Send(b.view(), Communicator::kAnySource, 0), InvalidArgument);
  });
}

// A message of another size fails that receive only, naming both sizes;
// the pair's next messages and the collectives still work.
TEST(PointToPointErrors, ASizeThatDiffersFailsOnlyThatReceive) {
  CollectiveJob job(2);
  job.RunOk([&](int rank, CollectiveService& s) {
    Communicator& world = s.World();
    if (rank == 1) {
      Buffer wrong(DType::kF32, 5);
      world.Send(wrong.view(), 0, 4);
      Buffer right(DType::kF32, 4);
      right.Set(3, 42);
      world.Send(right.view(), 0, 4);
    } else {
      Buffer b(DType::kF32, 4);
      try {
        world.Recv(b.view(), 1, 4);
        ADD_FAILURE() << "a 20-byte message filled a 16-byte receive";
      } catch (const ProtocolError& e) {
        EXPECT_NE(std::string(e.what()).find("20 bytes"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("16 bytes"), std::string::npos) << e.what();
      }
      world.Recv(b.view(), 1, 4);
      EXPECT_EQ(b.Get(3), 42);
    }
    Buffer one(DType::kF32, 1);
    one.Set(0, 1);
    world.AllReduce(one.view(), one.view());
    EXPECT_EQ(one.Get(0), 2);
  });
}

// A receive whose message never comes times out naming the operation and
// the rank, and fails the group (later operations fail at once).
TEST(PointToPointErrors, AReceiveTimesOutNamingTheSender) {
  CollectiveJob job(2);
  job.RunOk([&](int rank, CollectiveService& s) {
    Communicator& world = s.World();
    if (rank == 1) return;
    Buffer b(DType::kF32, 4);
    CollectiveOptions o;
    o.name = "stage2.input";
    o.timeout = std::chrono::milliseconds(500);
    const auto start = Clock::now();
    try {
      world.Recv(b.view(), 1, 11, o);
      ADD_FAILURE() << "a receive completed without a send";
    } catch (const Timeout& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("Recv of 'stage2.input' (4 x float32, group rank 0 of 2) from rank 1"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("tag 11"), std::string::npos) << what;
      EXPECT_NE(what.find("did not send it"), std::string::npos) << what;
    }
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
    EXPECT_THROW(world.Recv(b.view(), 1, 11), Timeout);
  });
}

}  // namespace
}  // namespace tandem::collective
