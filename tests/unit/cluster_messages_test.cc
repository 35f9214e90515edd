// Codecs of the membership protocol: round trips, validation, and survival of
// truncated or corrupted input.
#include "cluster/cluster_messages.h"

#include <gtest/gtest.h>

#include <random>

#include "tandem/error.h"

namespace tandem::cluster {
namespace {

NodeTable MakeTable(int servers, int workers) {
  NodeTable t;
  t.num_servers = servers;
  t.num_workers = workers;
  int id = 0;
  t.nodes.push_back({id++, Role::kScheduler, 0, "10.0.0.1", 9000});
  for (int r = 0; r < servers; ++r) t.nodes.push_back({id++, Role::kServer, r, "10.0.0.2", 100});
  for (int r = 0; r < workers; ++r) {
    t.nodes.push_back({id++, Role::kWorker, r, "fd00::5", static_cast<uint16_t>(200 + r)});
  }
  return t;
}

class NodeTableTest : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(NodeTableTest, RoundTrips) {
  auto [servers, workers] = GetParam();
  NodeTable t = MakeTable(servers, workers);
  NodeTable back = NodeTable::Decode(t.Encode());
  ASSERT_EQ(back.nodes.size(), t.nodes.size());
  EXPECT_EQ(back.num_servers, servers);
  EXPECT_EQ(back.num_workers, workers);
  for (size_t i = 0; i < t.nodes.size(); ++i) {
    EXPECT_EQ(back.nodes[i].ToString(), t.nodes[i].ToString());
  }
}

TEST_P(NodeTableTest, EveryTruncationIsAProtocolError) {
  auto [servers, workers] = GetParam();
  std::string bytes = MakeTable(servers, workers).Encode();
  for (size_t len = 0; len < bytes.size(); ++len) {
    EXPECT_THROW(NodeTable::Decode(bytes.substr(0, len)), ProtocolError) << "length " << len;
  }
  EXPECT_THROW(NodeTable::Decode(bytes + "x"), ProtocolError);
}

TEST_P(NodeTableTest, RandomCorruptionNeverCrashes) {
  auto [servers, workers] = GetParam();
  std::string bytes = MakeTable(servers, workers).Encode();
  std::mt19937 rng(servers * 100 + workers);
  int accepted = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string b = bytes;
    b[rng() % b.size()] = static_cast<char>(rng());
    try {
      NodeTable t = NodeTable::Decode(b);
      ++accepted;  // a flipped host byte or port is still a valid table
      EXPECT_EQ(t.nodes.size(), static_cast<size_t>(t.num_servers + t.num_workers + 1));
    } catch (const ProtocolError&) {
    }
  }
  EXPECT_LT(accepted, 2000);
}

INSTANTIATE_TEST_SUITE_P(Sizes, NodeTableTest,
                         ::testing::Values(std::pair{0, 1}, std::pair{1, 1}, std::pair{2, 4},
                                           std::pair{3, 7}));

TEST(NodeTable, RejectsOutOfOrderRanks) {
  NodeTable t = MakeTable(1, 2);
  std::swap(t.nodes[2].rank, t.nodes[3].rank);
  try {
    NodeTable::Decode(t.Encode());
    FAIL() << "accepted a table with ranks out of order";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("out of order"), std::string::npos) << e.what();
  }
}

TEST(NodeTable, RejectsCountMismatch) {
  NodeTable t = MakeTable(1, 2);
  t.num_workers = 3;
  EXPECT_THROW(NodeTable::Decode(t.Encode()), ProtocolError);
}

TEST(RegisterRequest, RoundTripsAndValidates) {
  RegisterRequest r;
  r.role = Role::kServer;
  r.requested_rank = 3;
  r.host = "host-a";
  r.port = 4242;
  r.pid = 77;
  r.hostname = "pod-1";
  RegisterRequest back = RegisterRequest::Decode(r.Encode());
  EXPECT_EQ(back.role, Role::kServer);
  EXPECT_EQ(back.requested_rank, 3);
  EXPECT_EQ(back.host, "host-a");
  EXPECT_EQ(back.port, 4242);
  EXPECT_EQ(back.pid, 77u);
  EXPECT_EQ(back.hostname, "pod-1");

  std::string bytes = r.Encode();
  bytes[0] = 9;  // role
  EXPECT_THROW(RegisterRequest::Decode(bytes), ProtocolError);
  r.host.clear();
  EXPECT_THROW(RegisterRequest::Decode(r.Encode()), ProtocolError);
}

TEST(BarrierRequest, ValidatesMaskAndFlags) {
  BarrierRequest b{group::kServers | group::kWorkers, BarrierRequest::kFinal, 12};
  BarrierRequest back = BarrierRequest::Decode(b.Encode());
  EXPECT_EQ(back.groups, group::kServers | group::kWorkers);
  EXPECT_EQ(back.flags, BarrierRequest::kFinal);
  EXPECT_EQ(back.sequence, 12u);
  EXPECT_THROW(BarrierRequest::Decode(BarrierRequest{0, 0, 1}.Encode()), ProtocolError);
  EXPECT_THROW(BarrierRequest::Decode(BarrierRequest{8, 0, 1}.Encode()), ProtocolError);
  EXPECT_THROW(BarrierRequest::Decode(BarrierRequest{1, 4, 1}.Encode()), ProtocolError);
  // A regroup's barrier asks for admissions.
  BarrierRequest regroup{group::kWorkers, BarrierRequest::kAdmit, 3};
  EXPECT_EQ(BarrierRequest::Decode(regroup.Encode()).flags, BarrierRequest::kAdmit);
}

TEST(BarrierFailure, RoundTripsAndRejectsBadKind) {
  BarrierFailure f{true, "waiting for: worker 2"};
  BarrierFailure back = BarrierFailure::Decode(f.Encode());
  EXPECT_TRUE(back.timed_out);
  EXPECT_EQ(back.text, "waiting for: worker 2");
  std::string bytes = f.Encode();
  bytes[0] = 2;
  EXPECT_THROW(BarrierFailure::Decode(bytes), ProtocolError);
}

TEST(NodeLostNotice, RoundTrips) {
  NodeLostNotice n{{5, Role::kWorker, 2, "::1", 7}, "its connection closed"};
  NodeLostNotice back = NodeLostNotice::Decode(n.Encode());
  EXPECT_EQ(back.node.ToString(), "worker 2 (node 5, [::1]:7)");
  EXPECT_EQ(back.reason, "its connection closed");
}

TEST(JobStop, RequestAndNoticeRoundTripAndRejectAnUnknownKind) {
  JobStopRequest q{StopKind::kIoError, "write of /ckpt/kv-optimizer.server1: no space left"};
  JobStopRequest q2 = JobStopRequest::Decode(q.Encode());
  EXPECT_EQ(q2.kind, StopKind::kIoError);
  EXPECT_EQ(q2.reason, q.reason);
  JobStoppedNotice n{{2, Role::kServer, 1, "127.0.0.1", 9}, StopKind::kInvalidArgument, "bad"};
  JobStoppedNotice n2 = JobStoppedNotice::Decode(n.Encode());
  EXPECT_EQ(n2.node.ToString(), "server 1 (node 2, 127.0.0.1:9)");
  EXPECT_EQ(n2.kind, StopKind::kInvalidArgument);
  EXPECT_EQ(n2.reason, "bad");
  std::string bytes = q.Encode();
  bytes[0] = static_cast<char>(static_cast<uint8_t>(StopKind::kLast) + 1);
  EXPECT_THROW(JobStopRequest::Decode(bytes), ProtocolError);
  for (size_t cut = 0; cut < n.Encode().size(); ++cut) {
    EXPECT_THROW(JobStoppedNotice::Decode(n.Encode().substr(0, cut)), ProtocolError) << cut;
  }
}

// Each kind comes back as the exception it names, so every node of a
// stopped job exits with the stopping node's code.
TEST(JobStop, KindsMapToTheirExceptions) {
  const std::vector<std::pair<std::exception_ptr, StopKind>> cases = {
      {std::make_exception_ptr(InvalidArgument("a")), StopKind::kInvalidArgument},
      {std::make_exception_ptr(CallMismatch("a")), StopKind::kInvalidArgument},
      {std::make_exception_ptr(ConfigError("a")), StopKind::kConfigError},
      {std::make_exception_ptr(IoError("a")), StopKind::kIoError},
      {std::make_exception_ptr(ProtocolError("a")), StopKind::kProtocolError},
      {std::make_exception_ptr(Error("a")), StopKind::kError},
      {std::make_exception_ptr(std::runtime_error("a")), StopKind::kError},
  };
  for (const auto& [error, kind] : cases) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      EXPECT_EQ(StopKindOf(e), kind) << e.what();
    }
  }
  EXPECT_THROW(ThrowStopKind(StopKind::kInvalidArgument, "x"), InvalidArgument);
  EXPECT_THROW(ThrowStopKind(StopKind::kConfigError, "x"), ConfigError);
  EXPECT_THROW(ThrowStopKind(StopKind::kIoError, "x"), IoError);
  EXPECT_THROW(ThrowStopKind(StopKind::kProtocolError, "x"), ProtocolError);
  EXPECT_THROW(ThrowStopKind(StopKind::kError, "x"), Error);
}

struct GroupCase {
  int mask;
  std::string name;
  bool scheduler, server, worker;
};

class GroupTest : public ::testing::TestWithParam<GroupCase> {};

TEST_P(GroupTest, MembershipAndName) {
  const auto& c = GetParam();
  EXPECT_EQ(GroupsName(c.mask), c.name);
  EXPECT_EQ(InGroups({0, Role::kScheduler, 0, "h", 1}, c.mask), c.scheduler);
  EXPECT_EQ(InGroups({1, Role::kServer, 0, "h", 1}, c.mask), c.server);
  EXPECT_EQ(InGroups({2, Role::kWorker, 0, "h", 1}, c.mask), c.worker);
}

INSTANTIATE_TEST_SUITE_P(Masks, GroupTest,
                         ::testing::Values(GroupCase{1, "scheduler", true, false, false},
                                           GroupCase{2, "servers", false, true, false},
                                           GroupCase{4, "workers", false, false, true},
                                           GroupCase{6, "servers+workers", false, true, true},
                                           GroupCase{5, "scheduler+workers", true, false, true},
                                           GroupCase{7, "scheduler+servers+workers", true, true,
                                                     true}));

}  // namespace
}  // namespace tandem::cluster
