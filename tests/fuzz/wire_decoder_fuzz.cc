// libFuzzer target: arbitrary bytes through FrameReader, in chunks whose sizes
// come from the input, with limits, staging size and payload posting chosen
// by the input too. Any ProtocolError is a correct answer; a crash, leak,
// sanitizer report or broken invariant is a bug (docs/wire-format.md).
//
// Input layout (scripts/make-fuzz-corpus.py writes seeds in it):
//   byte 0   options: bits 0-1 limits, bits 2-3 posting, bits 4-6 staging size,
//            bit 7 start with HandshakeLimits() and switch to the chosen
//            limits after the first frame (the transport's pattern)
//   byte 1   k = number of chunk-size bytes (mod 32); 0 means "whatever
//            WritableSpan() offers"
//   k bytes  chunk sizes, each byte b meaning b + 1 bytes, used in turn
//   rest     the byte stream
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "net/frame_reader.h"
#include "net/hmac_handshake.h"
#include "tandem/error.h"

namespace {

using tandem::net::FrameReader;
using tandem::net::FrameSink;
using tandem::net::Header;
using tandem::net::Message;
using tandem::net::WireLimits;

[[noreturn]] void Violated(const char* what) {
  std::fprintf(stderr, "wire_decoder_fuzz: invariant violated: %s\n", what);
  std::abort();
}

#define FUZZ_CHECK(cond) \
  do {                   \
    if (!(cond)) {       \
      Violated(#cond);   \
    }                    \
  } while (false)

// Kept well below libFuzzer's default -malloc_limit_mb so that a frame at
// the limit is a legal allocation, not an out-of-memory report.
WireLimits ChooseLimits(unsigned bits) {
  constexpr WireLimits kChoices[] = {
      {4096, 1u << 20},
      {64, 256},
      {0, 0},
      {1u << 20, 16u << 20},
  };
  return kChoices[bits & 3u];
}

size_t ChooseStaging(unsigned bits) {
  constexpr size_t kChoices[] = {64, 65, 100, 256, 4096, 65536, 256 * 1024, 71};
  return kChoices[bits & 7u];
}

enum class Posting { kNever, kExact, kWrongSize, kAlternate };

class CheckingSink : public FrameSink {
 public:
  CheckingSink(Posting posting, FrameReader** reader, const WireLimits* switch_to)
      : posting_(posting), reader_(reader), switch_to_(switch_to) {}

  std::span<std::byte> PayloadDestination(const Header& h, const std::string& meta) override {
    FUZZ_CHECK(h.payload_length > 0);
    FUZZ_CHECK(meta.size() == h.meta_length);
    Posting mode = posting_;
    if (mode == Posting::kAlternate) mode = (calls_ % 2 == 0) ? Posting::kExact : Posting::kNever;
    ++calls_;
    expect_posted_ = mode == Posting::kExact;
    if (mode == Posting::kNever) return {};
    size_t size = mode == Posting::kExact ? h.payload_length : h.payload_length - 1;
    posted_.push_back(std::make_unique<std::byte[]>(size == 0 ? 1 : size));
    posted_data_ = posted_.back().get();
    return {posted_data_, size};
  }

  void OnFrame(Message&& msg) override {
    FUZZ_CHECK(msg.meta.size() == msg.header.meta_length);
    FUZZ_CHECK(msg.payload.bytes.size() == msg.header.payload_length);
    if (msg.header.payload_length == 0) {
      FUZZ_CHECK(msg.payload.owned == nullptr);
    } else if (expect_posted_) {
      FUZZ_CHECK(msg.payload.in_posted_buffer());
      FUZZ_CHECK(msg.payload.bytes.data() == posted_data_);
    } else {
      FUZZ_CHECK(msg.payload.owned != nullptr);
      FUZZ_CHECK(msg.payload.bytes.data() == msg.payload.owned.get());
    }
    // Touch every byte so the sanitizers see any out-of-bounds span.
    unsigned sum = 0;
    for (std::byte b : msg.payload.bytes) sum += static_cast<unsigned>(b);
    for (char c : msg.meta) sum += static_cast<unsigned char>(c);
    checksum_ += sum;
    frame_bytes_ += tandem::net::kHeaderSize + msg.meta.size() + msg.payload.bytes.size();
    if (switch_to_ != nullptr && frames_ == 0) (*reader_)->SetLimits(*switch_to_);
    ++frames_;
    expect_posted_ = false;
  }

  uint64_t frame_bytes() const { return frame_bytes_; }

 private:
  Posting posting_;
  FrameReader** reader_;
  const WireLimits* switch_to_;
  std::vector<std::unique_ptr<std::byte[]>> posted_;
  std::byte* posted_data_ = nullptr;
  bool expect_posted_ = false;
  unsigned calls_ = 0;
  uint64_t frames_ = 0;
  uint64_t frame_bytes_ = 0;
  unsigned checksum_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const unsigned options = data[0];
  const size_t k = data[1] % 32u;
  if (size < 2 + k) return 0;
  std::span<const uint8_t> chunks(data + 2, k);
  std::span<const uint8_t> stream(data + 2 + k, size - 2 - k);

  WireLimits limits = ChooseLimits(options);
  const bool handshake_first = (options & 0x80u) != 0;
  FrameReader* reader_ptr = nullptr;
  CheckingSink sink(static_cast<Posting>((options >> 2) & 3u), &reader_ptr,
                    handshake_first ? &limits : nullptr);
  FrameReader reader(handshake_first ? tandem::net::HandshakeLimits() : limits, &sink,
                     ChooseStaging(options >> 4));
  reader_ptr = &reader;

  size_t next_chunk = 0;
  try {
    while (!stream.empty()) {
      std::span<std::byte> span = reader.WritableSpan();
      FUZZ_CHECK(!span.empty());
      size_t n = std::min(span.size(), stream.size());
      if (k > 0) n = std::min<size_t>(n, chunks[next_chunk++ % k] + 1u);
      std::memcpy(span.data(), stream.data(), n);
      reader.Commit(n);
      stream = stream.subspan(n);
    }
  } catch (const tandem::ProtocolError&) {
    return 0;  // the connection would be dropped; nothing else to check
  }
  FUZZ_CHECK(reader.bytes_consumed() == size - 2 - k);
  if (reader.AtFrameBoundary()) {
    FUZZ_CHECK(sink.frame_bytes() == reader.bytes_consumed());
  } else {
    FUZZ_CHECK(sink.frame_bytes() < reader.bytes_consumed());
  }
  return 0;
}
