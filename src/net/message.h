// Messages as the transport hands them up and takes them down.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "net/wire_format.h"

namespace tandem::net {

/// A received payload: either bytes the transport allocated (`owned`) or the
/// destination an upper layer posted for it. `bytes` always spans the payload.
struct Payload {
  std::unique_ptr<std::byte[]> owned;
  std::span<std::byte> bytes;
  /// True when the payload landed in a posted destination buffer.
  bool in_posted_buffer() const { return !bytes.empty() && owned == nullptr; }
};

/// A message that arrived, complete.
struct Message {
  Header header;
  std::string meta;
  Payload payload;
};

/// A message to send. The payload is borrowed: the transport reads it
/// straight from caller memory (scatter/gather), so the caller must keep every
/// span alive and unchanged until `on_sent` runs.
struct OutgoingMessage {
  /// type, flags, sender, recipient, message_id, request_id; the transport
  /// fills in the lengths.
  Header header;
  std::string meta;
  std::vector<std::span<const std::byte>> payload;
  /// Runs once, on the transport's thread, when every byte has been handed
  /// to the kernel (nullptr) or the send failed (the error). After it runs
  /// the payload memory may be reused. Optional.
  std::function<void(std::exception_ptr)> on_sent;
  /// Storage the message owns (e.g. a small payload built on the fly);
  /// `payload` may point into it.
  std::vector<std::byte> owned_storage;
  /// Whether Send may block this thread while the connection's send queue is
  /// full (docs/transport.md, "Back-pressure"). False for senders that hold a
  /// lock the transport's own thread may need (a decorating transport's
  /// internal sends): they are queued at once, over the bound if need be.
  bool may_wait = true;
};

}  // namespace tandem::net
