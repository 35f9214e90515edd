// The same-host mailbox (docs/collectives.md "Mailbox"; the layout in
// docs/protocol-collective.md): small collective messages between workers
// on one host go through shared memory instead of TCP, written by the
// sending thread and read by the waiting one, so that no transport thread
// is woken on either side.
//
// Each worker creates one region (a memfd) holding one single-producer,
// single-consumer byte ring per worker rank and a doorbell. A peer that
// passed the same-host probe maps the region through /proc/PID/fd/FD (the
// probe carries FD) and writes its records into the ring of its own rank,
// then rings the doorbell; the owner drains the rings while it waits. A
// record is a `data` piece of at most PeerMesh::kCopySendBytes, a
// `data ref` or a `data ref done`, with the same meaning as on TCP. A full
// ring refuses the record and the sender uses TCP instead: the receiver
// matches pieces by key, so the path of each is free.
//
// Everything read from a ring was written by another process and is
// checked like bytes from a socket: a malformed record is a ProtocolError
// naming the ring's rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>

#include "base/doorbell.h"
#include "base/unique_fd.h"
#include "collective/collective_messages.h"

namespace tandem::collective {

/// One record read from a ring. `payload` points into the ring and is valid
/// only during the delivery callback.
struct MailboxRecord {
  uint16_t type = 0;  // msg::kData, msg::kDataRef or msg::kDataRefDone
  MessageKey key;
  uint64_t address = 0;                // kDataRef: where the bytes are in the sender
  uint64_t length = 0;                 // kDataRef: how many
  std::span<const std::byte> payload;  // kData
};

/// A record parsed at a ring position: its size in the ring (a multiple of
/// 8), whether it is only padding up to the ring's end, and its content.
struct ParsedMailboxRecord {
  size_t size = 0;
  bool padding = false;
  MailboxRecord record;
};

/// Parses the record at the start of `published` (the bytes the producer
/// published from this position, up to the ring's end), `to_end` bytes
/// before the ring's end. Throws ProtocolError naming what was wrong.
ParsedMailboxRecord ParseMailboxRecord(std::span<const std::byte> published, size_t to_end);

/// The size in a ring of a record with `payload_bytes` bytes.
size_t MailboxRecordSize(size_t payload_bytes);

/// Writes `record` (not padding) at `at`, which has room for
/// MailboxRecordSize(record.payload.size()) bytes; the bytes after the
/// payload up to that size are left as they are.
void WriteMailboxRecord(std::byte* at, const MailboxRecord& record);

/// This process's region: the rings peers write into, and its doorbell.
/// Thread-safety: Drain is called by one thread at a time (the caller
/// serialises); doorbell() from any thread.
class MailboxRegion {
 public:
  /// Bytes of each ring by default: room for several of the largest
  /// pieces (32 KiB) in flight per peer.
  static constexpr size_t kDefaultRingBytes = size_t{256} << 10;

  /// Creates a region with `rings` rings (one per worker rank) of
  /// `ring_bytes` each (a multiple of 64), tagged with `cookie` so that a
  /// peer can tell it opened the right file. Throws IoError naming the call
  /// that failed.
  MailboxRegion(int rings, size_t ring_bytes, uint64_t cookie);
  ~MailboxRegion();
  MailboxRegion(const MailboxRegion&) = delete;
  MailboxRegion& operator=(const MailboxRegion&) = delete;

  /// The memfd's descriptor in this process (for the probe).
  int fd() const { return fd_.get(); }
  /// Rung by peers after each record and by this process on any other news.
  base::Doorbell& doorbell() { return *doorbell_; }

  /// Hands the records published in the ring of worker `sender` to
  /// `deliver`, in order, each only once; the ring's space is released
  /// after `deliver` returns, so it must copy what it keeps. Returns how
  /// many records it delivered. Throws ProtocolError (naming `sender`) for a
  /// malformed ring, after which the ring is not read again.
  size_t Drain(int sender, const std::function<void(const MailboxRecord&)>& deliver);

  /// Backs the ring of worker `sender` with memory now (the file's pages
  /// are otherwise allocated on first touch, in the middle of operations).
  /// Leaves the ring's content alone, so it may run while the peer writes.
  void Prefault(int sender);

 private:
  base::UniqueFd fd_;
  uint64_t cookie_ = 0;
  std::byte* base_ = nullptr;
  size_t bytes_ = 0;
  int rings_ = 0;
  size_t ring_bytes_ = 0;
  std::unique_ptr<base::Doorbell> doorbell_;
};

/// A peer's region, mapped to write this process's ring in it.
/// Thread-safety: TryWrite may be called from any thread.
class MailboxLink {
 public:
  /// Maps the region process `pid` holds open as descriptor `fd`, checks
  /// its cookie and geometry, and returns a link that writes ring
  /// `self_rank`. Throws IoError (the open or map failed) or ProtocolError
  /// (not a mailbox, or another cookie or size), naming the path.
  MailboxLink(int32_t pid, int32_t fd, uint64_t cookie, int self_rank);
  ~MailboxLink();
  MailboxLink(const MailboxLink&) = delete;
  MailboxLink& operator=(const MailboxLink&) = delete;

  /// Writes one record (type msg::kData with `payload`, msg::kDataRef with
  /// `address` and `length`, or msg::kDataRefDone) and, unless `ring` is
  /// false (the caller then owes a Ring()), rings the peer's doorbell.
  /// Returns false, having written nothing, when the ring has no room for
  /// it. Throws ProtocolError when the ring's indices are corrupt.
  bool TryWrite(uint16_t type, const MessageKey& key, std::span<const std::byte> payload,
                uint64_t address = 0, uint64_t length = 0, bool ring = true);
  /// Rings the peer's doorbell (after writes with `ring` false).
  void Ring() { doorbell_->Ring(); }

 private:
  std::mutex mu_;  // one writer at a time into the ring
  uint64_t cookie_ = 0;
  std::byte* base_ = nullptr;
  size_t bytes_ = 0;
  size_t ring_bytes_ = 0;
  int self_rank_ = 0;
  std::unique_ptr<base::Doorbell> doorbell_;
};

}  // namespace tandem::collective
