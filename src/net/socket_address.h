// Socket addresses and the system calls that set sockets up: name
// resolution, listening, connecting with a deadline, socket options.
//
// Resolution failures are returned, not thrown, because the caller decides
// which of them are worth retrying (a Kubernetes peer's DNS name appears only
// once its pod is scheduled, so EAI_NONAME is often temporary).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "net/endpoint.h"

namespace tandem::net {

/// One IPv4 or IPv6 socket address. Thread-safety: a value type.
class SocketAddress {
 public:
  SocketAddress() = default;
  /// Copies `len` bytes of `addr` (at most sizeof(sockaddr_storage)).
  SocketAddress(const sockaddr* addr, socklen_t len);

  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage_); }
  socklen_t size() const { return len_; }
  int family() const { return storage_.ss_family; }

  /// The numeric host and port. IPv4-mapped IPv6 addresses (a dual-stack
  /// listener's view of an IPv4 peer) come out in dotted IPv4 form.
  Endpoint ToEndpoint() const;

  /// The local address of socket `fd` (getsockname). Throws IoError.
  static SocketAddress LocalOf(int fd);
  /// The peer address of connected socket `fd` (getpeername). Throws IoError.
  static SocketAddress PeerOf(int fd);

 private:
  sockaddr_storage storage_{};
  socklen_t len_ = 0;
};

/// What name resolution produced: addresses, or the resolver's error.
struct Resolution {
  std::vector<SocketAddress> addresses;
  int gai_error = 0;       ///< 0, or the getaddrinfo EAI_* code
  std::string error_text;  ///< gai_strerror (or errno text for EAI_SYSTEM)
  /// True when the failure may go away by itself (no such name yet, DNS
  /// temporarily unavailable).
  bool retryable = false;
};

/// Resolves `ep` to TCP socket addresses with getaddrinfo; `passive` for a
/// listener (an empty host then means every IPv4 interface). Blocks for as
/// long as the resolver does: never call it on an event-loop thread. Never
/// throws on resolver failure (see Resolution).
Resolution Resolve(const Endpoint& ep, bool passive);

/// Creates a non-blocking, close-on-exec socket listening on `local` (the
/// first address it resolves to), with SO_REUSEADDR; the IPv6 wildcard "::"
/// also accepts IPv4. Stores the address actually bound in `*bound` (the
/// port chosen by the kernel when `local.port` is 0). Throws IoError naming
/// the address and the failing call.
base::UniqueFd ListenOn(const Endpoint& local, Endpoint* bound);

/// Connects a new non-blocking socket to `addr`, waiting at most until
/// `deadline` for the TCP handshake (in the calling thread). Returns 0 and
/// stores the socket in `*out`, or returns the errno of the failure
/// (ETIMEDOUT when the deadline passed). A connection that the kernel looped
/// back to its own port (TCP simultaneous open on a free local port) is
/// reported as ECONNREFUSED, since nobody listens there.
int ConnectBefore(const SocketAddress& addr, std::chrono::steady_clock::time_point deadline,
                  base::UniqueFd* out);

/// True for connect errors that a listener appearing later, or a network
/// coming up, can cure (ECONNREFUSED, ENETUNREACH, EHOSTUNREACH, ETIMEDOUT,
/// ECONNRESET, ECONNABORTED, EAGAIN).
bool IsRetryableConnectError(int err);

/// Sets TCP_NODELAY on `fd`. Throws IoError.
void SetNoDelay(int fd);

/// Sets SO_SNDBUF and SO_RCVBUF on `fd` to `bytes` when `bytes` > 0 (the
/// kernel's autotuning is kept otherwise). Throws IoError.
void SetBufferSizes(int fd, int bytes);

/// Sets the floor of `fd`'s retransmission time-out (TCP_RTO_MIN_US, Linux
/// 6.15 and later; the kernel rounds it up to whole clock ticks). Returns
/// false when the kernel does not know the option.
bool SetRtoMin(int fd, std::chrono::microseconds floor);

/// errno's text for `err`.
std::string ErrnoText(int err);

}  // namespace tandem::net
