// FrameReader: frames split anywhere, many per read, payloads into posted
// destinations, limits checked before allocation, garbage rejected
// (docs/wire-format.md).
#include "net/frame_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "tandem/error.h"

namespace tandem::net {
namespace {

using testing::HasSubstr;

struct FrameSpec {
  Header header;
  std::string meta;
  std::vector<std::byte> payload;
};

// A frame whose every field and byte depends on `id`, so frames delivered in
// the wrong order or with shifted bytes are told apart.
FrameSpec Spec(uint64_t id, size_t meta_len, size_t payload_len) {
  FrameSpec f;
  f.header.type = static_cast<uint16_t>(msgtype::kKvFirst + id % 50);
  f.header.flags = id % 3 == 0 ? flags::kResponse : 0;
  f.header.sender = static_cast<int32_t>(id % 7) - 1;
  f.header.recipient = static_cast<int32_t>(id % 5);
  f.header.message_id = 1000 + id;
  f.header.request_id = 77 * id;
  for (size_t i = 0; i < meta_len; ++i) f.meta.push_back(static_cast<char>('a' + (i + id) % 26));
  for (size_t i = 0; i < payload_len; ++i) {
    f.payload.push_back(static_cast<std::byte>((i * 31 + id * 7) & 0xFF));
  }
  f.header.meta_length = static_cast<uint32_t>(meta_len);
  f.header.payload_length = payload_len;
  return f;
}

void Append(std::vector<std::byte>& out, const FrameSpec& f) {
  std::array<std::byte, kHeaderSize> h;
  EncodeHeader(f.header, h);
  out.insert(out.end(), h.begin(), h.end());
  auto meta = std::as_bytes(std::span(f.meta.data(), f.meta.size()));
  out.insert(out.end(), meta.begin(), meta.end());
  out.insert(out.end(), f.payload.begin(), f.payload.end());
}

std::vector<std::byte> Stream(const std::vector<FrameSpec>& frames) {
  std::vector<std::byte> out;
  for (const auto& f : frames) Append(out, f);
  return out;
}

// Stream offsets where a frame starts or the stream ends.
std::vector<size_t> Boundaries(const std::vector<FrameSpec>& frames) {
  std::vector<size_t> out = {0};
  for (const auto& f : frames)
    out.push_back(out.back() + kHeaderSize + f.meta.size() + f.payload.size());
  return out;
}

enum class Post { kNever, kExact, kWrongSize };

std::string PostName(Post post) {
  switch (post) {
    case Post::kNever:
      return "Owned";
    case Post::kExact:
      return "Posted";
    case Post::kWrongSize:
      return "WrongSizePosted";
  }
  return "Unknown";
}

class RecordingSink : public FrameSink {
 public:
  explicit RecordingSink(Post post = Post::kNever) : post_(post) {}

  std::span<std::byte> PayloadDestination(const Header& h, const std::string& meta) override {
    EXPECT_EQ(meta.size(), h.meta_length) << "metadata must be complete before the payload";
    ++destination_calls;
    if (post_ == Post::kNever) return {};
    size_t size = post_ == Post::kExact ? h.payload_length : h.payload_length + 1;
    posted.push_back(std::make_unique<std::vector<std::byte>>(size));
    return *posted.back();
  }

  void OnFrame(Message&& msg) override {
    if (on_frame) on_frame(msg);
    frames.push_back(std::move(msg));
  }

  std::vector<Message> frames;
  std::vector<std::unique_ptr<std::vector<std::byte>>> posted;  // in order of frames with payload
  int destination_calls = 0;
  std::function<void(const Message&)> on_frame;

 private:
  Post post_;
};

// Writes `bytes` into the reader, each Commit() taking at most `next_chunk()`
// bytes (and at most what WritableSpan() offers). Returns the commit count.
size_t Feed(FrameReader& reader, std::span<const std::byte> bytes,
            const std::function<size_t()>& next_chunk) {
  size_t commits = 0;
  while (!bytes.empty()) {
    auto span = reader.WritableSpan();
    EXPECT_FALSE(span.empty());
    size_t n = std::min({span.size(), bytes.size(), std::max<size_t>(1, next_chunk())});
    std::memcpy(span.data(), bytes.data(), n);
    reader.Commit(n);
    bytes = bytes.subspan(n);
    ++commits;
  }
  return commits;
}

size_t FeedAll(FrameReader& reader, std::span<const std::byte> bytes) {
  return Feed(reader, bytes, [] { return SIZE_MAX; });
}

void ExpectFrames(const RecordingSink& sink, const std::vector<FrameSpec>& want, Post post) {
  ASSERT_EQ(sink.frames.size(), want.size());
  size_t posted_index = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("frame " + std::to_string(i));
    const Message& got = sink.frames[i];
    const FrameSpec& w = want[i];
    EXPECT_EQ(got.header.type, w.header.type);
    EXPECT_EQ(got.header.flags, w.header.flags);
    EXPECT_EQ(got.header.sender, w.header.sender);
    EXPECT_EQ(got.header.recipient, w.header.recipient);
    EXPECT_EQ(got.header.message_id, w.header.message_id);
    EXPECT_EQ(got.header.request_id, w.header.request_id);
    EXPECT_EQ(got.header.meta_length, w.header.meta_length);
    EXPECT_EQ(got.header.payload_length, w.header.payload_length);
    EXPECT_EQ(got.meta, w.meta);
    ASSERT_EQ(got.payload.bytes.size(), w.payload.size());
    EXPECT_TRUE(std::equal(w.payload.begin(), w.payload.end(), got.payload.bytes.begin()));
    if (w.payload.empty()) {
      EXPECT_EQ(got.payload.owned, nullptr);
      continue;
    }
    if (post == Post::kExact) {
      EXPECT_TRUE(got.payload.in_posted_buffer());
      EXPECT_EQ(got.payload.bytes.data(), sink.posted.at(posted_index)->data());
    } else {
      EXPECT_FALSE(got.payload.in_posted_buffer());
      EXPECT_EQ(got.payload.bytes.data(), got.payload.owned.get());
    }
    ++posted_index;
  }
}

// A mix of shapes: empty frames, meta only, payload only, a payload large
// enough to be read directly with small staging buffers, and trailing tiny
// frames that share reads with it.
std::vector<FrameSpec> MixedFrames() {
  return {Spec(0, 0, 0), Spec(1, 10, 0), Spec(2, 0, 5),   Spec(3, 150, 1500),
          Spec(4, 3, 1), Spec(5, 0, 0),  Spec(6, 70, 64), Spec(7, 1, 200)};
}

WireLimits Roomy() { return WireLimits{}; }

using SplitParam = std::tuple<size_t /*staging bytes*/, Post>;

class FrameReaderSplitTest : public testing::TestWithParam<SplitParam> {
 protected:
  size_t staging() const { return std::get<0>(GetParam()); }
  Post post() const { return std::get<1>(GetParam()); }
};

TEST_P(FrameReaderSplitTest, DecodesWhenSplitAtEveryByteBoundary) {
  auto frames = MixedFrames();
  auto stream = Stream(frames);
  auto boundaries = Boundaries(frames);
  for (size_t split = 0; split <= stream.size(); ++split) {
    SCOPED_TRACE("split at " + std::to_string(split));
    RecordingSink sink(post());
    FrameReader reader(Roomy(), &sink, staging());
    FeedAll(reader, std::span(stream).first(split));
    EXPECT_EQ(reader.AtFrameBoundary(),
              std::find(boundaries.begin(), boundaries.end(), split) != boundaries.end());
    FeedAll(reader, std::span(stream).subspan(split));
    ExpectFrames(sink, frames, post());
    EXPECT_TRUE(reader.AtFrameBoundary());
    EXPECT_EQ(reader.bytes_consumed(), stream.size());
    if (HasFailure()) return;
  }
}

TEST_P(FrameReaderSplitTest, DecodesOneByteAtATime) {
  auto frames = MixedFrames();
  auto stream = Stream(frames);
  RecordingSink sink(post());
  FrameReader reader(Roomy(), &sink, staging());
  EXPECT_EQ(Feed(reader, stream, [] { return 1; }), stream.size());
  ExpectFrames(sink, frames, post());
}

TEST_P(FrameReaderSplitTest, DecodesRandomChunks) {
  auto frames = MixedFrames();
  auto stream = Stream(frames);
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    std::uniform_int_distribution<size_t> chunk(1, 300);
    RecordingSink sink(post());
    FrameReader reader(Roomy(), &sink, staging());
    Feed(reader, stream, [&] { return chunk(rng); });
    ExpectFrames(sink, frames, post());
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(StagingAndPosting, FrameReaderSplitTest,
                         testing::Combine(testing::Values(kHeaderSize, 128, 4096, 256 * 1024),
                                          testing::Values(Post::kNever, Post::kExact,
                                                          Post::kWrongSize)),
                         [](const auto& tp) {
                           return "Staging" + std::to_string(std::get<0>(tp.param)) +
                                  PostName(std::get<1>(tp.param));
                         });

class FrameReaderBatchTest : public testing::TestWithParam<std::tuple<size_t, size_t, size_t>> {};

TEST_P(FrameReaderBatchTest, ParsesManyFramesFromOneCommit) {
  auto [count, meta_len, payload_len] = GetParam();
  std::vector<FrameSpec> frames;
  for (size_t i = 0; i < count; ++i) frames.push_back(Spec(i, meta_len, payload_len));
  auto stream = Stream(frames);
  RecordingSink sink;
  FrameReader reader(Roomy(), &sink);
  ASSERT_GE(reader.WritableSpan().size(), stream.size());
  EXPECT_EQ(FeedAll(reader, stream), 1u);
  ExpectFrames(sink, frames, Post::kNever);
  EXPECT_TRUE(reader.AtFrameBoundary());
}

INSTANTIATE_TEST_SUITE_P(Shapes, FrameReaderBatchTest,
                         testing::Values(std::make_tuple(1, 0, 0), std::make_tuple(500, 0, 0),
                                         std::make_tuple(200, 20, 30), std::make_tuple(50, 0, 1000),
                                         std::make_tuple(30, 4000, 0)));

TEST(FrameReaderTest, ReadsAPostedPayloadStraightIntoItsDestination) {
  auto frame = Spec(1, 12, 10000);
  auto stream = Stream({frame});
  RecordingSink sink(Post::kExact);
  FrameReader reader(Roomy(), &sink);
  size_t first = kHeaderSize + 12 + 100;  // header, meta and the start of the payload
  auto span = reader.WritableSpan();
  std::memcpy(span.data(), stream.data(), first);
  reader.Commit(first);
  ASSERT_EQ(sink.posted.size(), 1u);
  std::byte* dest = sink.posted[0]->data();
  EXPECT_TRUE(std::equal(frame.payload.begin(), frame.payload.begin() + 100, dest))
      << "the staged part of the payload is copied into the destination";

  span = reader.WritableSpan();
  EXPECT_EQ(span.data(), dest + 100);
  EXPECT_EQ(span.size(), 9900u);
  std::memcpy(span.data(), stream.data() + first, 5000);
  reader.Commit(5000);
  EXPECT_TRUE(sink.frames.empty());
  EXPECT_FALSE(reader.AtFrameBoundary());

  span = reader.WritableSpan();
  EXPECT_EQ(span.data(), dest + 5100);
  EXPECT_EQ(span.size(), 4900u);
  std::memcpy(span.data(), stream.data() + first + 5000, 4900);
  reader.Commit(4900);
  ExpectFrames(sink, {frame}, Post::kExact);
  EXPECT_TRUE(reader.AtFrameBoundary());
}

TEST(FrameReaderTest, WrongSizeDestinationFallsBackToAnOwnedPayload) {
  auto frame = Spec(2, 0, 300);
  auto stream = Stream({frame});
  RecordingSink sink(Post::kWrongSize);
  FrameReader reader(Roomy(), &sink);
  FeedAll(reader, stream);
  ASSERT_EQ(sink.frames.size(), 1u);
  EXPECT_NE(sink.frames[0].payload.owned, nullptr);
  EXPECT_NE(sink.frames[0].payload.bytes.data(), sink.posted[0]->data());
  ExpectFrames(sink, {frame}, Post::kWrongSize);
}

TEST(FrameReaderTest, ReadsALargeOwnedPayloadDirectly) {
  const size_t payload = FrameReader::kDirectReadThreshold * 3 + 17;
  auto frame = Spec(3, 5, payload);
  auto stream = Stream({frame, Spec(4, 1, 1)});
  RecordingSink sink;
  FrameReader reader(Roomy(), &sink);
  auto staging = reader.WritableSpan();
  size_t first = kHeaderSize + 5 + 10;
  std::memcpy(staging.data(), stream.data(), first);
  reader.Commit(first);
  auto span = reader.WritableSpan();
  EXPECT_EQ(span.size(), payload - 10) << "the rest of the payload is offered in one span";
  EXPECT_TRUE(span.data() + span.size() <= staging.data() ||
              span.data() >= staging.data() + staging.size())
      << "the span must not point into the staging buffer";
  FeedAll(reader, std::span(stream).subspan(first));
  ExpectFrames(sink, {frame, Spec(4, 1, 1)}, Post::kNever);
}

TEST(FrameReaderTest, ReadsMetadataLargerThanTheStagingBufferDirectly) {
  auto frame = Spec(5, 100000, 3);
  auto stream = Stream({frame});
  RecordingSink sink;
  FrameReader reader(Roomy(), &sink, 4096);
  size_t first = kHeaderSize + 10;
  std::memcpy(reader.WritableSpan().data(), stream.data(), first);
  reader.Commit(first);
  EXPECT_EQ(reader.WritableSpan().size(), 100000u - 10);
  FeedAll(reader, std::span(stream).subspan(first));
  ExpectFrames(sink, {frame}, Post::kNever);
}

TEST(FrameReaderTest, FramesWithoutMetaOrPayloadNeedNoDestination) {
  std::vector<FrameSpec> frames = {Spec(0, 0, 0), Spec(1, 4, 0), Spec(2, 0, 0)};
  RecordingSink sink(Post::kExact);
  FrameReader reader(Roomy(), &sink);
  FeedAll(reader, Stream(frames));
  EXPECT_EQ(sink.destination_calls, 0);
  ExpectFrames(sink, frames, Post::kExact);
}

TEST(FrameReaderTest, ChecksThePayloadLimitBeforeAllocating) {
  // A 2^60-byte payload would make an allocation throw std::bad_alloc (or
  // exhaust memory) and the sink would be asked for a destination first; the
  // reader must stop at the header with a ProtocolError instead.
  FrameSpec f = Spec(6, 0, 0);
  f.header.payload_length = uint64_t{1} << 60;
  auto stream = Stream({f});
  WireLimits limits;
  limits.max_payload_bytes = 1u << 20;
  RecordingSink sink(Post::kExact);
  FrameReader reader(limits, &sink);
  auto span = reader.WritableSpan();
  std::memcpy(span.data(), stream.data(), kHeaderSize);
  EXPECT_NO_THROW(reader.Commit(kHeaderSize - 1)) << "an incomplete header is not judged";
  span = reader.WritableSpan();
  span[0] = stream[kHeaderSize - 1];
  try {
    reader.Commit(1);
    FAIL() << "expected a ProtocolError";
  } catch (const ProtocolError& e) {
    EXPECT_THAT(e.what(), HasSubstr("payload length 1152921504606846976 exceeds limit 1048576"));
  }
  EXPECT_EQ(sink.destination_calls, 0);
  EXPECT_TRUE(sink.frames.empty());
}

TEST(FrameReaderTest, ChecksTheMetadataLimitBeforeAllocating) {
  FrameSpec f = Spec(7, 0, 0);
  f.header.meta_length = UINT32_MAX;
  WireLimits limits;
  limits.max_meta_bytes = 1024;
  RecordingSink sink;
  FrameReader reader(limits, &sink);
  EXPECT_THROW(FeedAll(reader, Stream({f})), ProtocolError);
  EXPECT_TRUE(sink.frames.empty());
}

struct Garbage {
  std::string name;
  std::vector<std::byte> bytes;
  size_t valid_frames;  // complete valid frames before the garbage
};

std::vector<std::byte> FromText(const std::string& s) {
  auto b = std::as_bytes(std::span(s.data(), s.size()));
  return {b.begin(), b.end()};
}

std::vector<std::byte> RandomBytes(uint32_t seed, size_t n) {
  std::mt19937 rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

std::vector<Garbage> GarbageInputs() {
  std::vector<Garbage> g;
  g.push_back({"zeros", std::vector<std::byte>(200, std::byte{0}), 0});
  g.push_back({"http",
               FromText("GET /metrics HTTP/1.1\r\nHost: localhost\r\nUser-Agent: curl/7.88\r\n"
                        "Accept: */*\r\n\r\n"),
               0});
  g.push_back({"tls_client_hello", RandomBytes(9, 300), 0});
  g[2].bytes[0] = std::byte{0x16};
  g[2].bytes[1] = std::byte{0x03};
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    g.push_back({"random_" + std::to_string(seed), RandomBytes(seed, 64 + seed * 100), 0});
  }
  auto valid_then_noise = Stream({Spec(1, 3, 4), Spec(2, 0, 0)});
  auto noise = RandomBytes(42, 100);
  valid_then_noise.insert(valid_then_noise.end(), noise.begin(), noise.end());
  g.push_back({"valid_frames_then_noise", valid_then_noise, 2});
  // A valid header whose checksum is off by one bit in the request id.
  auto flipped = Stream({Spec(3, 0, 0)});
  flipped[33] ^= std::byte{0x10};
  g.push_back({"flipped_bit", flipped, 0});
  return g;
}

class FrameReaderGarbageTest : public testing::TestWithParam<Garbage> {};

TEST_P(FrameReaderGarbageTest, ThrowsProtocolError) {
  RecordingSink sink(Post::kExact);
  FrameReader reader(Roomy(), &sink);
  EXPECT_THROW(FeedAll(reader, GetParam().bytes), ProtocolError);
  EXPECT_EQ(sink.frames.size(), GetParam().valid_frames);
}

INSTANTIATE_TEST_SUITE_P(Inputs, FrameReaderGarbageTest, testing::ValuesIn(GarbageInputs()),
                         [](const auto& tp) { return tp.param.name; });

TEST(FrameReaderTest, TracksFrameBoundaries) {
  auto frame = Spec(1, 8, 8);
  auto stream = Stream({frame});
  RecordingSink sink;
  FrameReader reader(Roomy(), &sink);
  EXPECT_TRUE(reader.AtFrameBoundary());
  FeedAll(reader, std::span(stream).first(10));
  EXPECT_FALSE(reader.AtFrameBoundary()) << "inside the header";
  FeedAll(reader, std::span(stream).subspan(10, kHeaderSize - 10 + 4));
  EXPECT_FALSE(reader.AtFrameBoundary()) << "inside the metadata";
  FeedAll(reader, std::span(stream).subspan(kHeaderSize + 4, 8));
  EXPECT_FALSE(reader.AtFrameBoundary()) << "inside the payload";
  FeedAll(reader, std::span(stream).subspan(kHeaderSize + 12));
  EXPECT_TRUE(reader.AtFrameBoundary());
  EXPECT_EQ(sink.frames.size(), 1u);
}

TEST(FrameReaderTest, TighterLimitsSetFromOnFrameApplyToAnAlreadyStagedFrame) {
  auto stream = Stream({Spec(1, 0, 0), Spec(2, 100, 0)});
  RecordingSink sink;
  FrameReader reader(Roomy(), &sink);
  sink.on_frame = [&](const Message&) {
    WireLimits tight;
    tight.max_meta_bytes = 10;
    reader.SetLimits(tight);
  };
  try {
    FeedAll(reader, stream);
    FAIL() << "expected a ProtocolError";
  } catch (const ProtocolError& e) {
    EXPECT_THAT(e.what(), HasSubstr("metadata length 100 exceeds limit 10"));
  }
  EXPECT_EQ(sink.frames.size(), 1u);
}

TEST(FrameReaderTest, LooserLimitsSetFromOnFrameLetTheNextFrameThrough) {
  // The handshake's pattern: tiny limits, then the configured ones, with the
  // first real frame possibly in the same read as the handshake's last one.
  std::vector<FrameSpec> frames = {Spec(1, 8, 0), Spec(2, 2000, 5000)};
  WireLimits tiny;
  tiny.max_meta_bytes = 16;
  tiny.max_payload_bytes = 0;
  RecordingSink sink;
  FrameReader reader(tiny, &sink);
  sink.on_frame = [&](const Message&) { reader.SetLimits(Roomy()); };
  EXPECT_EQ(FeedAll(reader, Stream(frames)), 1u);
  ExpectFrames(sink, frames, Post::kNever);
}

// A connection's pattern: a staging buffer sized for the handshake, grown
// from OnFrame once authenticated, with the next frames possibly already in
// the same read; every frame still decodes intact.
TEST(FrameReaderTest, StagingGrownFromOnFrameKeepsEveryFrameIntact) {
  std::vector<FrameSpec> frames = {Spec(1, 8, 0)};
  for (const FrameSpec& f : MixedFrames()) frames.push_back(f);
  frames.push_back(Spec(9, 5, 300000));
  RecordingSink sink;
  FrameReader reader(Roomy(), &sink, 1024);
  EXPECT_EQ(reader.staging_bytes(), 1024u);
  sink.on_frame = [&](const Message&) { reader.GrowStaging(256 * 1024); };
  auto stream = Stream(frames);
  Feed(reader, stream, [] { return size_t{700}; });
  ExpectFrames(sink, frames, Post::kNever);
  EXPECT_EQ(reader.staging_bytes(), 256u * 1024);
  reader.GrowStaging(1024);  // never shrinks
  reader.WritableSpan();
  EXPECT_EQ(reader.staging_bytes(), 256u * 1024);
}

TEST(FrameReaderTest, SinkExceptionsPropagateOutOfCommit) {
  RecordingSink sink;
  FrameReader reader(Roomy(), &sink);
  sink.on_frame = [](const Message&) { throw AuthFailed("rejected by the sink"); };
  EXPECT_THROW(FeedAll(reader, Stream({Spec(1, 1, 1)})), AuthFailed);
}

TEST(FrameReaderTest, RejectsCommitsLargerThanTheSpan) {
  RecordingSink sink;
  FrameReader reader(Roomy(), &sink, 100);
  EXPECT_THROW(reader.Commit(1), InvalidArgument) << "no span was handed out yet";
  auto span = reader.WritableSpan();
  EXPECT_EQ(span.size(), 100u);
  EXPECT_THROW(reader.Commit(101), InvalidArgument);
  EXPECT_NO_THROW(reader.Commit(0));
  EXPECT_EQ(reader.bytes_consumed(), 0u);
}

TEST(FrameReaderTest, RejectsUnusableConstruction) {
  RecordingSink sink;
  EXPECT_THROW(FrameReader(Roomy(), &sink, kHeaderSize - 1), InvalidArgument);
  EXPECT_THROW(FrameReader(Roomy(), nullptr), InvalidArgument);
}

}  // namespace
}  // namespace tandem::net
