// Routing of messages by type range and fan-out of connection events.
#include "net/message_dispatcher.h"

#include <gtest/gtest.h>

#include <vector>

#include "tandem/error.h"

namespace tandem::net {
namespace {

struct Recorder : TransportHandler {
  std::vector<uint16_t> types;
  int connected = 0;
  int disconnected = 0;
  void OnConnected(ConnectionId, const PeerInfo&) override { ++connected; }
  void OnMessage(ConnectionId, Message&& m) override { types.push_back(m.header.type); }
  void OnDisconnected(ConnectionId, const std::string&) override { ++disconnected; }
};

Message Of(uint16_t type) {
  Message m;
  m.header.type = type;
  return m;
}

TEST(MessageDispatcher, RoutesByRangeAndFansOutEvents) {
  MessageDispatcher d;
  Recorder a, b;
  d.Register(64, 79, &a);
  d.Register(80, 95, &b);
  d.Register(128, 130, &a);  // a second range of the same service
  for (uint16_t t : {64, 79, 80, 95, 129}) d.OnMessage(1, Of(t));
  EXPECT_EQ(a.types, (std::vector<uint16_t>{64, 79, 129}));
  EXPECT_EQ(b.types, (std::vector<uint16_t>{80, 95}));
  d.OnConnected(1, {});
  d.OnDisconnected(1, "gone");
  EXPECT_EQ(a.connected, 1);
  EXPECT_EQ(b.connected, 1);
  EXPECT_EQ(a.disconnected, 1);
  EXPECT_EQ(b.disconnected, 1);
}

TEST(MessageDispatcher, RejectsOverlapsAndBadRanges) {
  MessageDispatcher d;
  Recorder a, b;
  d.Register(64, 79, &a);
  EXPECT_THROW(d.Register(79, 80, &b), InvalidArgument);
  EXPECT_THROW(d.Register(90, 85, &b), InvalidArgument);
  EXPECT_THROW(d.Register(250, 300, &b), InvalidArgument);
  EXPECT_THROW(d.Register(100, 101, nullptr), InvalidArgument);
  d.Register(80, 80, &b);  // adjacent is fine
  d.OnMessage(1, Of(80));
  EXPECT_EQ(b.types.size(), 1u);
}

}  // namespace
}  // namespace tandem::net
