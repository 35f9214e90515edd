// The same-host mailbox (src/collective/same_host_mailbox.h): records go
// through a peer's ring in order and intact across the ring's end, a full
// ring refuses a record without writing any of it, a region is checked
// before it is written, a malformed ring is refused naming its rank, and a
// writer in another process wakes a sleeper through the doorbell.
#include "collective/same_host_mailbox.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "tandem/error.h"

namespace tandem::collective {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kCookie = 0x1234abcd5678ef01ULL;

std::vector<std::byte> Pattern(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed * 7) & 0xff);
  return v;
}

struct Seen {
  uint16_t type;
  MessageKey key;
  uint64_t address, length;
  std::vector<std::byte> payload;
};

std::vector<Seen> DrainAll(MailboxRegion& region, int sender) {
  std::vector<Seen> out;
  region.Drain(sender, [&](const MailboxRecord& r) {
    out.push_back({r.type, r.key, r.address, r.length, {r.payload.begin(), r.payload.end()}});
  });
  return out;
}

TEST(SameHostMailbox, RecordsArriveInOrderInTheirSendersRing) {
  MailboxRegion region(4, 8192, kCookie);
  MailboxLink link(::getpid(), region.fd(), kCookie, 2);
  const auto bytes = Pattern(100, 1);
  ASSERT_TRUE(link.TryWrite(msg::kData, {1, 5, 9}, bytes));
  ASSERT_TRUE(link.TryWrite(msg::kDataRef, {1, 5, 10}, {}, 0x7f0000001000, 1 << 20));
  ASSERT_TRUE(link.TryWrite(msg::kDataRefDone, {0, 6, 11}, {}));
  ASSERT_TRUE(link.TryWrite(msg::kData, {0, 7, 12}, {}));
  for (int other : {0, 1, 3}) EXPECT_TRUE(DrainAll(region, other).empty()) << other;
  const auto seen = DrainAll(region, 2);
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].type, msg::kData);
  EXPECT_EQ(seen[0].key, (MessageKey{1, 5, 9}));
  EXPECT_EQ(seen[0].payload, bytes);
  EXPECT_EQ(seen[1].type, msg::kDataRef);
  EXPECT_EQ(seen[1].address, 0x7f0000001000u);
  EXPECT_EQ(seen[1].length, 1u << 20);
  EXPECT_EQ(seen[2].type, msg::kDataRefDone);
  EXPECT_EQ(seen[2].key, (MessageKey{0, 6, 11}));
  EXPECT_EQ(seen[3].type, msg::kData);
  EXPECT_TRUE(seen[3].payload.empty());
  EXPECT_TRUE(DrainAll(region, 2).empty());  // each record once
}

// Many records of one size through a small ring: they wrap around its end
// (padding where a record does not fit) and fill it; a full ring refuses
// and takes the record once drained.
class MailboxWrap : public ::testing::TestWithParam<size_t> {};

TEST_P(MailboxWrap, RecordsCrossTheRingsEndIntactAndAFullRingRefuses) {
  const size_t payload = GetParam();
  MailboxRegion region(2, 4096, kCookie);
  MailboxLink link(::getpid(), region.fd(), kCookie, 1);
  constexpr uint64_t kCount = 300;
  uint64_t written = 0, drained = 0, refusals = 0;
  while (drained < kCount) {
    while (written < kCount) {
      const auto bytes = Pattern(payload, written);
      if (!link.TryWrite(msg::kData, {3, written, written * 2}, bytes)) {
        ++refusals;
        break;
      }
      ++written;
    }
    for (const Seen& s : DrainAll(region, 1)) {
      ASSERT_EQ(s.key, (MessageKey{3, drained, drained * 2}));
      ASSERT_EQ(s.payload, Pattern(payload, drained)) << "record " << drained;
      ++drained;
    }
    ASSERT_EQ(drained, written);
  }
  // 300 records of at least 56 bytes cannot fit 4096 at once.
  EXPECT_GT(refusals, 0u);
}

INSTANTIATE_TEST_SUITE_P(PayloadBytes, MailboxWrap,
                         ::testing::Values(size_t{0}, size_t{1}, size_t{100}, size_t{1000},
                                           size_t{4096 - 56}));

TEST(SameHostMailbox, ARecordLargerThanTheRingIsRefused) {
  MailboxRegion region(2, 4096, kCookie);
  MailboxLink link(::getpid(), region.fd(), kCookie, 0);
  EXPECT_FALSE(link.TryWrite(msg::kData, {0, 0, 0}, Pattern(4096 - 55, 0)));
  EXPECT_TRUE(DrainAll(region, 0).empty());
}

TEST(SameHostMailbox, ALinkChecksTheRegionBeforeWriting) {
  MailboxRegion region(3, 4096, kCookie);
  try {
    MailboxLink bad(::getpid(), region.fd(), kCookie + 1, 0);
    FAIL() << "another cookie was accepted";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("cookie"), std::string::npos) << e.what();
  }
  try {
    MailboxLink bad(::getpid(), region.fd(), kCookie, 3);
    FAIL() << "a rank without a ring was accepted";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("none for rank 3"), std::string::npos) << e.what();
  }
  // A file that is no mailbox.
  const int other = ::memfd_create("not-a-mailbox", MFD_CLOEXEC);
  ASSERT_GE(other, 0);
  ASSERT_EQ(::ftruncate(other, 1 << 16), 0);
  try {
    MailboxLink bad(::getpid(), other, kCookie, 0);
    FAIL() << "a zeroed file was accepted";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("magic"), std::string::npos) << e.what();
  }
  ::close(other);
  EXPECT_THROW(MailboxLink(::getpid(), 987654, kCookie, 0), IoError);
}

// Bytes a broken or hostile peer could leave in its ring.
struct Malformed {
  const char* name;
  std::vector<uint32_t> words;  // the record, as 32-bit words
  size_t to_end;
  const char* says;
};

class MailboxParse : public ::testing::TestWithParam<Malformed> {};

TEST_P(MailboxParse, AMalformedRecordIsAProtocolError) {
  const Malformed& m = GetParam();
  std::vector<std::byte> bytes(m.words.size() * 4);
  std::memcpy(bytes.data(), m.words.data(), bytes.size());
  try {
    ParseMailboxRecord(bytes, m.to_end);
    FAIL() << m.name << " parsed";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find(m.says), std::string::npos) << e.what();
  }
}

// A 56-byte header: size, type | reserved << 16, communicator, payload
// bytes, then sequence, tag, address, length, call as pairs of words.
std::vector<uint32_t> Header(uint32_t size, uint32_t type, uint32_t payload,
                             size_t extra_words = 0) {
  std::vector<uint32_t> w = {size, type, 1, payload, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  w.resize(w.size() + extra_words, 0);
  return w;
}

INSTANTIATE_TEST_SUITE_P(
    Records, MailboxParse,
    ::testing::Values(
        Malformed{"short", {8}, 64, "bytes published"},
        Malformed{"odd_size", Header(60, msg::kData, 4, 2), 64, "not a multiple of 8"},
        Malformed{"past_published", Header(72, msg::kData, 16), 128, "bytes published"},
        Malformed{"padding_short_of_end", {16, 0, 0, 0}, 64, "does not reach the ring's end"},
        Malformed{"unknown_type", Header(56, 7, 0), 64, "type 7"},
        Malformed{"reserved_set", Header(56, msg::kData | (1u << 16), 0), 64, "reserved 1"},
        Malformed{"below_header", {16, msg::kData, 0, 0}, 64, "below the 56-byte header"},
        Malformed{"payload_on_ref", Header(64, msg::kDataRef, 8, 2), 64, "carries 8 payload"},
        Malformed{"size_not_payload", Header(64, msg::kData, 20, 2), 64, "does not fit"}),
    [](const ::testing::TestParamInfo<Malformed>& p) { return std::string(p.param.name); });

TEST(SameHostMailbox, AMalformedRingIsRefusedNamingItsRank) {
  MailboxRegion region(3, 4096, kCookie);
  MailboxLink link(::getpid(), region.fd(), kCookie, 1);
  ASSERT_TRUE(link.TryWrite(msg::kData, {0, 1, 2}, Pattern(40, 3)));
  // Another mapping of the file, as a broken peer: the record's type byte.
  const size_t bytes = 128 + 3 * (128 + 4096);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, region.fd(), 0);
  ASSERT_NE(p, MAP_FAILED);
  auto* base = static_cast<std::byte*>(p);
  base[128 + 1 * (128 + 4096) + 128 + 4] = std::byte{99};
  try {
    DrainAll(region, 1);
    FAIL() << "a record of type 99 was delivered";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("worker rank 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("type 99"), std::string::npos) << e.what();
  }
  ::munmap(p, bytes);
}

// Another process writes a record after the owner fell asleep on the
// doorbell: the sleep ends well before its deadline and the record is there.
TEST(SameHostMailbox, AWriterInAnotherProcessWakesTheSleeper) {
  MailboxRegion region(2, 4096, kCookie);
  const uint32_t seen = region.doorbell().Value();
  const pid_t parent = ::getpid();
  const int fd = region.fd();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int rc = 1;
    try {
      MailboxLink link(parent, fd, kCookie, 0);
      ::usleep(100000);
      const std::byte b[3] = {std::byte{1}, std::byte{2}, std::byte{3}};
      rc = link.TryWrite(msg::kData, {0, 42, 0}, b) ? 0 : 2;
    } catch (...) {
      rc = 3;
    }
    ::_exit(rc);
  }
  const auto start = Clock::now();
  std::vector<Seen> got;
  while (got.empty() && Clock::now() - start < std::chrono::seconds(20)) {
    const uint32_t v = region.doorbell().Value();
    got = DrainAll(region, 0);
    if (got.empty()) region.doorbell().Sleep(v, start + std::chrono::seconds(20));
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].key.sequence, 42u);
  EXPECT_EQ(got[0].payload.size(), 3u);
  EXPECT_NE(region.doorbell().Value(), seen);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace tandem::collective
