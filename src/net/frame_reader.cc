#include "net/frame_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "tandem/error.h"

namespace tandem::net {

// A payload length passed DecodeHeader's limit check is used as a size_t.
static_assert(sizeof(size_t) >= sizeof(uint64_t), "tandem needs a 64-bit address space");

FrameReader::FrameReader(WireLimits limits, FrameSink* sink, size_t staging_bytes)
    : limits_(limits), sink_(sink) {
  if (sink == nullptr) throw InvalidArgument("FrameReader needs a FrameSink, got nullptr");
  if (staging_bytes < kHeaderSize) {
    throw InvalidArgument(
        fmt::format("FrameReader staging buffer of {} bytes cannot hold a {}-byte frame header",
                    staging_bytes, kHeaderSize));
  }
  staging_.resize(staging_bytes);
}

std::span<std::byte> FrameReader::MetaRest() {
  auto* base = reinterpret_cast<std::byte*>(current_.meta.data());
  return {base + meta_filled_, current_.meta.size() - meta_filled_};
}

std::span<std::byte> FrameReader::PayloadRest() {
  return current_.payload.bytes.subspan(payload_filled_);
}

bool FrameReader::ReadDirect(size_t rest, bool posted) const {
  return rest > 0 && (posted || rest >= std::min(kDirectReadThreshold, staging_.size()));
}

std::span<std::byte> FrameReader::WritableSpan() {
  // Drain() leaves the staging buffer empty unless a partial header (fewer
  // than kHeaderSize bytes, moved to the front) is pending, so the staging
  // span below is never empty, and in kMeta/kPayload a direct read never
  // skips staged bytes.
  direct_ = false;
  if (staging_wanted_ > staging_.size()) {
    // Only [0, end_) is staged here (at most a partial header, at the front):
    // resizing keeps it.
    staging_.resize(staging_wanted_);
  }
  std::span<std::byte> span;
  if (state_ == State::kMeta) {
    auto rest = MetaRest();
    if (ReadDirect(rest.size(), false)) {
      span = rest;
      direct_ = true;
    }
  } else if (state_ == State::kPayload) {
    auto rest = PayloadRest();
    if (ReadDirect(rest.size(), current_.payload.in_posted_buffer())) {
      span = rest;
      direct_ = true;
    }
  }
  if (!direct_) span = std::span<std::byte>(staging_).subspan(end_);
  last_span_size_ = span.size();
  return span;
}

void FrameReader::Commit(size_t n) {
  if (n > last_span_size_) {
    throw InvalidArgument(
        fmt::format("FrameReader::Commit({}) exceeds the {} bytes of the last WritableSpan()", n,
                    last_span_size_));
  }
  // Each span is committed once; the next Commit() needs a new WritableSpan().
  last_span_size_ = 0;
  consumed_ += n;
  if (n == 0) return;
  if (direct_) {
    // The bytes went straight into the current section; the staging buffer
    // is empty, so nothing else can be parsed yet.
    direct_ = false;
    if (state_ == State::kMeta) {
      meta_filled_ += n;
      if (meta_filled_ == current_.meta.size()) StartPayload();
    } else {
      payload_filled_ += n;
      if (payload_filled_ == current_.header.payload_length) FinishFrame();
    }
    return;
  }
  end_ += n;
  Drain();
}

void FrameReader::Drain() {
  while (true) {
    size_t avail = end_ - begin_;
    if (state_ == State::kHeader) {
      if (avail < kHeaderSize) break;
      // DecodeHeader checks both lengths against limits_ before anything
      // below allocates them.
      Header h = DecodeHeader(
          std::span<const std::byte, kHeaderSize>(staging_.data() + begin_, kHeaderSize), limits_);
      begin_ += kHeaderSize;
      current_ = Message{};
      current_.header = h;
      current_.meta.resize(h.meta_length);
      meta_filled_ = 0;
      payload_filled_ = 0;
      state_ = State::kMeta;
      if (h.meta_length == 0) StartPayload();
      continue;
    }
    if (avail == 0) break;
    std::span<std::byte> rest = state_ == State::kMeta ? MetaRest() : PayloadRest();
    size_t take = std::min(avail, rest.size());
    std::memcpy(rest.data(), staging_.data() + begin_, take);
    begin_ += take;
    if (state_ == State::kMeta) {
      meta_filled_ += take;
      if (meta_filled_ == current_.meta.size()) StartPayload();
    } else {
      payload_filled_ += take;
      if (payload_filled_ == current_.header.payload_length) FinishFrame();
    }
  }
  if (begin_ == end_) {
    begin_ = end_ = 0;
  } else if (begin_ > 0) {
    std::memmove(staging_.data(), staging_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
}

void FrameReader::StartPayload() {
  const Header& h = current_.header;
  if (h.payload_length == 0) {
    FinishFrame();
    return;
  }
  std::span<std::byte> posted = sink_->PayloadDestination(h, current_.meta);
  if (posted.size() == h.payload_length) {
    current_.payload.bytes = posted;
  } else {
    current_.payload.owned = std::make_unique_for_overwrite<std::byte[]>(h.payload_length);
    current_.payload.bytes = {current_.payload.owned.get(), h.payload_length};
  }
  state_ = State::kPayload;
}

void FrameReader::FinishFrame() {
  Message done = std::move(current_);
  current_ = Message{};
  state_ = State::kHeader;
  sink_->OnFrame(std::move(done));
}

bool FrameReader::AtFrameBoundary() const { return state_ == State::kHeader && begin_ == end_; }

}  // namespace tandem::net
