// Incremental decoding of a byte stream into frames (docs/wire-format.md).
//
// The TCP connection and the fuzzer drive the same object: ask where the next
// bytes should go, read into that span, commit. Small frames are parsed out of
// an internal staging buffer (many frames per read() call); a large payload
// is read straight into its destination (a posted buffer, or one allocation of
// exactly payload_length bytes made only after the header was validated).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "net/message.h"
#include "net/wire_format.h"

namespace tandem::net {

/// Receives what a FrameReader decodes.
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  /// Called once header and metadata of a frame are complete, before its
  /// payload is read. Return a span of exactly `h.payload_length` bytes to
  /// receive the payload into (a posted destination), or an empty span to let
  /// the reader allocate. A span of any other size is a caller bug and is
  /// treated as empty.
  virtual std::span<std::byte> PayloadDestination(const Header& h, const std::string& meta) = 0;
  /// Called with every complete frame, in stream order.
  virtual void OnFrame(Message&& msg) = 0;
};

/// Thread-safety: one thread at a time (the connection's owner).
class FrameReader {
 public:
  /// `staging_bytes` is the size of the internal buffer small frames are
  /// parsed from.
  FrameReader(WireLimits limits, FrameSink* sink, size_t staging_bytes = 256 * 1024);

  /// Where the next bytes from the stream should be written; never empty.
  std::span<std::byte> WritableSpan();

  /// Declares that `n` bytes were written at the start of the span the last
  /// WritableSpan() returned, decodes every complete frame and hands it to
  /// the sink. Throws tandem::ProtocolError on the first violation; after
  /// that the reader must be discarded (the connection is dropped).
  void Commit(size_t n);

  /// True when no partial frame is pending (a clean place for EOF).
  bool AtFrameBoundary() const;

  /// Bytes consumed so far (for statistics).
  uint64_t bytes_consumed() const { return consumed_; }

 private:
  enum class State { kHeader, kMeta, kPayload };

  // Parses what is in staging_[begin_, end_); moves leftovers to the front.
  void Drain();
  void StartPayload();
  void FinishFrame();

  WireLimits limits_;
  FrameSink* sink_;
  std::vector<std::byte> staging_;
  size_t begin_ = 0;  // first unparsed staged byte
  size_t end_ = 0;    // one past the last staged byte
  State state_ = State::kHeader;
  Message current_;
  uint64_t payload_filled_ = 0;
  bool direct_ = false;  // last WritableSpan() pointed into the payload
  uint64_t consumed_ = 0;
};

}  // namespace tandem::net
