// Incremental decoding of a byte stream into frames (docs/wire-format.md).
//
// The TCP connection and the fuzzer drive the same object: ask where the next
// bytes should go, read into that span, commit. Small frames are parsed out of
// an internal staging buffer (many frames per read() call); a large payload
// is read straight into its destination (a posted buffer, or one allocation of
// exactly payload_length bytes made only after the header was validated).
//
// How bytes travel, and why:
//   - A header always goes through the staging buffer; a partial header is
//     moved to the buffer's front so the next read completes it.
//   - Metadata and payload bytes that arrived in the staging buffer are copied
//     out of it at once (the metadata into the message, the payload into its
//     destination), so the staging buffer never holds more than one partial
//     header when WritableSpan() is called.
//   - Once that is done, the rest of a section is read straight into its final
//     place, with no copy, when the destination was posted by the sink, or
//     when the rest is at least min(64 KiB, staging size) bytes long. Smaller
//     rests go through the staging buffer, so that the frames behind them
//     arrive in the same read().
// Every allocation (metadata string, owned payload) happens only after
// DecodeHeader checked the lengths against the current limits.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "net/message.h"
#include "net/wire_format.h"

namespace tandem::net {

/// Receives what a FrameReader decodes. Both callbacks run on the thread that
/// called FrameReader::Commit(), from inside it, and must not destroy the
/// reader. An exception a callback throws propagates out of Commit(); the
/// reader must then be discarded.
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  /// Called once header and metadata of a frame with a non-empty payload are
  /// complete, before its payload is read (not called for frames without
  /// payload). Return a span of exactly `h.payload_length` bytes to receive
  /// the payload into (a posted destination), or an empty span to let the
  /// reader allocate. A span of any other size is a caller bug and is treated
  /// as empty. The span must stay valid until OnFrame delivers the frame or
  /// the reader is destroyed.
  virtual std::span<std::byte> PayloadDestination(const Header& h, const std::string& meta) = 0;
  /// Called with every complete frame, in stream order. It may call
  /// FrameReader::SetLimits(), which then applies to the next frame even if
  /// its bytes were already read.
  virtual void OnFrame(Message&& msg) = 0;
};

/// Thread-safety: one thread at a time (the connection's owner).
class FrameReader {
 public:
  /// Payload and metadata rests at least this long skip the staging buffer.
  static constexpr size_t kDirectReadThreshold = 64 * 1024;

  /// `limits` applies to every header until SetLimits() changes it; `sink`
  /// must outlive the reader; `staging_bytes` is the size of the internal
  /// buffer small frames are parsed from and must be at least kHeaderSize
  /// (throws InvalidArgument otherwise).
  FrameReader(WireLimits limits, FrameSink* sink, size_t staging_bytes = 256 * 1024);

  /// Replaces the limits for every header decoded from now on (the handshake
  /// runs with tiny limits, then the connection switches to the configured
  /// ones). The frame being read, if any, keeps the limits it was checked
  /// against. May be called from inside FrameSink::OnFrame.
  void SetLimits(const WireLimits& limits) { limits_ = limits; }

  /// Makes the staging buffer `bytes` long (never shorter than it is) from
  /// the next WritableSpan() on: a connection starts with a buffer sized for
  /// the handshake, so that a peer that never authenticates costs little
  /// memory, and grows it once authenticated. May be called from inside
  /// FrameSink::OnFrame.
  void GrowStaging(size_t bytes) { staging_wanted_ = std::max(staging_wanted_, bytes); }

  /// The staging buffer's current size in bytes.
  size_t staging_bytes() const { return staging_.size(); }

  /// Where the next bytes from the stream should be written; never empty.
  /// The span stays valid until the next Commit().
  std::span<std::byte> WritableSpan();

  /// Declares that `n` bytes were written at the start of the span the last
  /// WritableSpan() returned (`n` may be smaller than the span, or 0), decodes
  /// every complete frame and hands it to the sink. Throws InvalidArgument if
  /// `n` exceeds that span (a caller bug), tandem::ProtocolError on the first
  /// violation of docs/wire-format.md; after an exception the reader must be
  /// discarded (the connection is dropped).
  void Commit(size_t n);

  /// True when no partial frame is pending (a clean place for EOF).
  bool AtFrameBoundary() const;

  /// Bytes consumed so far (for statistics).
  uint64_t bytes_consumed() const { return consumed_; }

 private:
  enum class State { kHeader, kMeta, kPayload };

  // Parses what is in staging_[begin_, end_); moves leftovers to the front.
  void Drain();
  // Entered once the metadata is complete: asks the sink for a destination
  // (or allocates one) and either finishes an empty-payload frame or moves
  // to kPayload.
  void StartPayload();
  void FinishFrame();
  // The part of the current metadata or payload not received yet.
  std::span<std::byte> MetaRest();
  std::span<std::byte> PayloadRest();
  // Whether the rest of the current section should skip the staging buffer.
  bool ReadDirect(size_t rest, bool posted) const;

  WireLimits limits_;
  FrameSink* sink_;
  std::vector<std::byte> staging_;
  size_t staging_wanted_ = 0;  // GrowStaging's size, applied by WritableSpan
  size_t begin_ = 0;           // first unparsed staged byte
  size_t end_ = 0;             // one past the last staged byte
  State state_ = State::kHeader;
  Message current_;
  size_t meta_filled_ = 0;
  uint64_t payload_filled_ = 0;
  bool direct_ = false;        // last WritableSpan() pointed into meta or payload
  size_t last_span_size_ = 0;  // size of the last WritableSpan()
  uint64_t consumed_ = 0;
};

}  // namespace tandem::net
