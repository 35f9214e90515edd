// The parameter server's metadata codecs: round trips, every truncation,
// and random garbage (which must only ever throw ProtocolError).
#include "kv/kv_messages.h"

#include <gtest/gtest.h>

#include <random>

#include "tandem/error.h"

namespace tandem::kv {
namespace {

KeyRequest Sample(int variant) {
  KeyRequest q;
  q.key = 42 + static_cast<uint64_t>(variant);
  q.worker_rank = variant;
  q.dtype = variant % 2 ? DType::kF16 : DType::kF32;
  q.mode = variant % 3 ? UpdateMode::kSync : UpdateMode::kAsync;
  q.total_elements = 1000;
  q.offset = 500;
  q.count = 500;
  q.row_length = 10;
  q.priority = -variant;
  if (variant == 2) {
    q.encoding = PayloadEncoding::kRowSparse;
    q.rows = {50, 51, 77, 99};
  }
  if (variant == 4) {
    q.dtype = DType::kF32;
    q.encoding = PayloadEncoding::kTwoBit;
    q.threshold = 0.5f;
  }
  return q;
}

class KeyRequestCodec : public ::testing::TestWithParam<int> {};

TEST_P(KeyRequestCodec, RoundTrips) {
  KeyRequest q = Sample(GetParam());
  KeyRequest d = KeyRequest::Decode(q.Encode());
  EXPECT_EQ(d.key, q.key);
  EXPECT_EQ(d.worker_rank, q.worker_rank);
  EXPECT_EQ(d.dtype, q.dtype);
  EXPECT_EQ(d.mode, q.mode);
  EXPECT_EQ(d.total_elements, q.total_elements);
  EXPECT_EQ(d.offset, q.offset);
  EXPECT_EQ(d.count, q.count);
  EXPECT_EQ(d.row_length, q.row_length);
  EXPECT_EQ(d.encoding, q.encoding);
  EXPECT_EQ(d.threshold, q.threshold);
  EXPECT_EQ(d.priority, q.priority);
  EXPECT_EQ(d.rows, q.rows);
  EXPECT_EQ(d.ExpectedPushBytes(), q.ExpectedPushBytes());
}

TEST_P(KeyRequestCodec, EveryTruncationAndExtensionIsRejected) {
  std::string bytes = Sample(GetParam()).Encode();
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(KeyRequest::Decode(bytes.substr(0, n)), ProtocolError) << "length " << n;
  }
  EXPECT_THROW(KeyRequest::Decode(bytes + "x"), ProtocolError);
}

INSTANTIATE_TEST_SUITE_P(Variants, KeyRequestCodec, ::testing::Range(0, 5));

TEST(KeyRequestCodec, RejectsInconsistentFields) {
  auto bad = [](auto mutate) {
    KeyRequest q = Sample(0);
    mutate(q);
    EXPECT_THROW(KeyRequest::Decode(q.Encode()), ProtocolError);
  };
  bad([](KeyRequest& q) { q.offset = 900; });        // past the end
  bad([](KeyRequest& q) { q.count = UINT64_MAX; });  // overflow
  bad([](KeyRequest& q) { q.row_length = 0; });
  bad([](KeyRequest& q) { q.row_length = 7; });   // does not divide
  bad([](KeyRequest& q) { q.rows = {60, 55}; });  // not ascending
  bad([](KeyRequest& q) { q.rows = {10}; });      // outside the slice
  bad([](KeyRequest& q) { q.worker_rank = -1; });
  bad([](KeyRequest& q) {
    q.dtype = DType::kF64;
    q.encoding = PayloadEncoding::kOneBit;
  });
  std::string s = Sample(0).Encode();
  s[0] = 9;  // version
  EXPECT_THROW(KeyRequest::Decode(s), ProtocolError);
}

TEST(KeyRequestCodec, ExpectedPushBytesFollowsTheFormats) {
  KeyRequest q = Sample(0);
  q.dtype = DType::kF32;
  EXPECT_EQ(q.ExpectedPushBytes(), 2000u);
  q.encoding = PayloadEncoding::kTwoBit;
  EXPECT_EQ(q.ExpectedPushBytes(), (500u + 15) / 16 * 4);
  q.encoding = PayloadEncoding::kOneBit;
  EXPECT_EQ(q.ExpectedPushBytes(), (500u + 31) / 32 * 4);
}

class Garbage : public ::testing::TestWithParam<uint32_t> {};

TEST_P(Garbage, DecodersOnlyThrowProtocolError) {
  std::mt19937 rng(GetParam());
  std::string valid = Sample(static_cast<int>(GetParam() % 5)).Encode();
  for (int round = 0; round < 2000; ++round) {
    std::string s;
    if (round % 2) {
      s.resize(rng() % 96);
      for (auto& c : s) c = static_cast<char>(rng());
    } else {
      s = valid;  // a valid record with a few bytes flipped
      for (int k = 0; k < 3; ++k) s[rng() % s.size()] = static_cast<char>(rng());
    }
    try {
      KeyRequest::Decode(s);
    } catch (const ProtocolError&) {
    }
    try {
      OptimizerCommand::Decode(s);
    } catch (const ProtocolError&) {
    }
    try {
      StatesCommand::Decode(s);
    } catch (const ProtocolError&) {
    }
    ErrorReply::Decode(s);  // never throws
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, Garbage, ::testing::Values(1u, 2u, 3u, 4u));

TEST(Commands, RoundTrip) {
  OptimizerCommand c{"adam", {{"learning_rate", "0.01"}, {"beta1", "0.9"}}};
  auto d = OptimizerCommand::Decode(c.Encode());
  EXPECT_EQ(d.name, "adam");
  EXPECT_EQ(d.params, c.params);
  EXPECT_EQ(StatesCommand::Decode(StatesCommand{"/tmp/x.server1"}.Encode()).path, "/tmp/x.server1");
  EXPECT_THROW(StatesCommand::Decode(StatesCommand{""}.Encode()), ProtocolError);
  ErrorReply e{ErrorKind::kInvalidArgument, "key 3: bad"};
  auto de = ErrorReply::Decode(e.Encode());
  EXPECT_EQ(de.kind, ErrorKind::kInvalidArgument);
  EXPECT_EQ(de.text, "key 3: bad");
  EXPECT_THROW(de.Throw("push"), InvalidArgument);
  EXPECT_EQ(ErrorReply::Decode("\x01").kind, ErrorKind::kProtocol);
}

// Receipts: both states round-trip; an unknown state, a missing byte and a
// trailing one are refused, naming what was wrong.
TEST(Receipts, RoundTripAndRefuseUnknownStates) {
  for (auto state : {Receipt::State::kMerged, Receipt::State::kParked}) {
    EXPECT_EQ(Receipt::Decode(Receipt{state}.Encode()).state, state);
  }
  try {
    Receipt::Decode(std::string("\x02", 1));
    ADD_FAILURE() << "state 2 decoded";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("state: expected 0 (merged) or 1 (parked), got 2"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(Receipt::Decode(""), ProtocolError);
  EXPECT_THROW(Receipt::Decode(std::string("\x00\x00", 2)), ProtocolError);
  EXPECT_EQ(KvMessageName(kvmsg::kReceipt), "receipt");
  EXPECT_GT(kvmsg::kReceipt, kvmsg::kLastDefined);  // a server refuses it as a request
}

}  // namespace
}  // namespace tandem::kv
