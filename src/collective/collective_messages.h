// The messages of the collectives (docs/protocol-collective.md) and their
// metadata codecs. Every decoder is bounds-checked and throws
// tandem::ProtocolError on malformed input.
#pragma once

#include <compare>
#include <cstdint>
#include <string>

#include "net/wire_format.h"

namespace tandem::collective {

/// Message types of the collective range (net::msgtype::kCollectiveFirst..255).
namespace msg {
/// First message on every mesh connection, from the connecting side.
inline constexpr uint16_t kHello = net::msgtype::kCollectiveFirst + 0;
/// A piece of an operation: metadata is a MessageKey, payload the bytes.
inline constexpr uint16_t kData = net::msgtype::kCollectiveFirst + 1;
/// The accepting side's answer to kHello (no metadata): the link is known
/// on both ends, data may flow.
inline constexpr uint16_t kHelloAck = net::msgtype::kCollectiveFirst + 2;
/// A piece the receiver copies out of the sender's memory itself (same
/// host, docs/collectives.md "Same-host copy"): metadata is a DataRef, no
/// payload. The sender's memory stays untouched until kDataRefDone.
inline constexpr uint16_t kDataRef = net::msgtype::kCollectiveFirst + 3;
/// The receiver is done with a kDataRef's memory: metadata is its MessageKey.
inline constexpr uint16_t kDataRefDone = net::msgtype::kCollectiveFirst + 4;
/// The connecting side's verdict on the accepting side's probe (after
/// kHelloAck on connection 0): metadata is a CopyStatus.
inline constexpr uint16_t kCopyStatus = net::msgtype::kCollectiveFirst + 5;
/// A member's word on a mismatched operation (its description of the call,
/// or why the operation cannot complete): metadata is a CallNotice
/// (call_description.h).
inline constexpr uint16_t kCallNotice = net::msgtype::kCollectiveFirst + 6;
inline constexpr uint16_t kLast = net::msgtype::kLast;
}  // namespace msg

/// Where a process's memory can be read from by a peer on the same host
/// (process_vm_readv): its pid and the address of an 8-byte cookie with its
/// value. pid 0: the process does not take part (another host's process
/// can never read it either way, since the cookie will not match there).
///
/// `mailbox`: the descriptor of the process's mailbox region (a memfd that a
/// peer opens as /proc/PID/fd/MAILBOX, same_host_mailbox.h), -1 for none.
struct CopyProbe {
  int32_t pid = 0;
  uint64_t address = 0;
  uint64_t cookie = 0;
  int32_t mailbox = -1;
};

/// kHello's metadata: who is connecting, which of the connections between
/// the pair this is (0..connections-1), and, on connection 0, its probe.
struct Hello {
  int32_t rank = -1;
  uint32_t connection = 0;
  uint32_t connections = 1;
  CopyProbe probe;
  /// A worker admitted into a running elastic job (it connects to every
  /// member, lower or higher): the membership epoch of its admission; 0 in
  /// a mesh that forms with the job.
  uint32_t joined_epoch = 0;

  std::string Encode() const;
  static Hello Decode(const std::string& meta);
};

/// kHelloAck's metadata: the accepting side's probe and whether it could
/// read the connecting side's memory (so the connecting side may send it
/// kDataRef).
struct HelloAck {
  CopyProbe probe;
  bool reads_you = false;

  std::string Encode() const;
  static HelloAck Decode(const std::string& meta);
};

/// kCopyStatus's metadata: whether the connecting side could read the
/// accepting side's memory.
struct CopyStatus {
  bool reads_you = false;

  std::string Encode() const;
  static CopyStatus Decode(const std::string& meta);
};

/// kData's metadata: which receive of which operation the payload fills.
/// (communicator, sequence) names the operation; `tag` the piece within it
/// (each algorithm documents its tags). The sender's rank comes from the
/// connection. `call` is the fingerprint of the sender's description of
/// the operation (call_description.h), which the receiver checks against
/// its own before it uses the piece; it is not part of the match (pieces
/// are matched by the other three fields, and compare equal without it).
/// Set in the sequence of a point-to-point message's key (point_to_point.h):
/// collective operations' sequences never reach it, so the two never meet,
/// and the call checks let such pieces through.
constexpr uint64_t kPointToPointSequence = uint64_t{1} << 63;

struct MessageKey {
  uint32_t communicator = 0;
  uint64_t sequence = 0;
  uint64_t tag = 0;
  uint64_t call = 0;

  std::strong_ordering operator<=>(const MessageKey& o) const {
    if (auto c = communicator <=> o.communicator; c != 0) return c;
    if (auto c = sequence <=> o.sequence; c != 0) return c;
    return tag <=> o.tag;
  }
  bool operator==(const MessageKey& o) const { return (*this <=> o) == 0; }
  std::string Encode() const;
  static MessageKey Decode(const std::string& meta);
};

/// kDataRef's metadata: the piece's key and where its bytes are in the
/// sender's address space.
struct DataRef {
  MessageKey key;
  uint64_t address = 0;
  uint64_t length = 0;

  std::string Encode() const;
  static DataRef Decode(const std::string& meta);
};

}  // namespace tandem::collective
