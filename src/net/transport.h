// The transport interface every layer above net/ talks to.
//
// A transport moves framed messages (docs/wire-format.md) over authenticated
// connections. Two implementations: TcpTransport (epoll, real sockets) and
// InProcTransport (several transports in one process, for fast unit tests).
// Upper layers never see a socket.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "base/wait_report.h"
#include "net/endpoint.h"
#include "net/message.h"
#include "net/tls_context.h"

namespace tandem::net {

using ConnectionId = uint64_t;

/// What the transport knows of the far end of a connection.
struct PeerInfo {
  Endpoint address;      ///< the peer's socket address (as seen by us)
  bool inbound = false;  ///< true when the peer connected to us
};

/// Receives the transport's events. All callbacks run on the transport's
/// own thread, one at a time; they must not block for long (hand work to
/// another thread instead), and may call Send() and Close().
class TransportHandler {
 public:
  virtual ~TransportHandler() = default;

  /// A connection finished the handshake (inbound or outbound).
  virtual void OnConnected(ConnectionId id, const PeerInfo& peer) { (void)id, (void)peer; }

  /// Where to put the payload of a message whose header and metadata have
  /// arrived on `id`: a span of exactly `h.payload_length` bytes (for example
  /// the output buffer of a pull whose response this is), or empty to let the
  /// transport allocate.
  virtual std::span<std::byte> PayloadDestination(ConnectionId id, const Header& h,
                                                  const std::string& meta) {
    (void)id, (void)h, (void)meta;
    return {};
  }

  /// A complete message arrived on `id`.
  virtual void OnMessage(ConnectionId id, Message&& msg) = 0;

  /// The connection is gone (peer closed, I/O error, protocol violation, or
  /// Close()). `reason` says which, with the peer's address. Not called for
  /// connections that never finished the handshake.
  virtual void OnDisconnected(ConnectionId id, const std::string& reason) {
    (void)id, (void)reason;
  }
};

/// Settings common to every transport.
struct TransportOptions {
  std::string job_id = "tandem";  ///< must match on both ends of a connection
  std::string secret;             ///< HMAC key of the handshake
  WireLimits limits;              ///< what we accept from a peer
  std::chrono::milliseconds handshake_timeout{10000};
  /// TANDEM_MAX_UNAUTHENTICATED: accepted connections that have not
  /// finished the handshake yet, at most; past it the oldest is dropped
  /// (docs/protocol-handshake.md, "Resources"). At least 1.
  size_t max_unauthenticated = 1024;
  /// TANDEM_WAIT_REPORT_SECONDS: how often a Connect that keeps retrying
  /// logs what it waits for (base/wait_report.h).
  std::chrono::milliseconds wait_report_interval = base::kDefaultWaitReportInterval;
  /// TANDEM_TLS=1: every TCP connection runs TLS 1.3 with mutual certificate
  /// checks first, and the HMAC handshake inside it (docs/transport.md,
  /// "TLS"). Null: plaintext. Must agree on both ends. The in-process
  /// transport ignores it.
  std::shared_ptr<const TlsContext> tls;
};

/// Thread-safety: Listen, Connect, Send and Close may be called from any
/// thread, including from inside a handler callback (except Connect, which
/// blocks and so must not be called from a callback).
class Transport {
 public:
  virtual ~Transport() = default;

  /// Binds to `local` (port 0 picks a free port) and accepts connections.
  /// Returns the address actually bound. Throws IoError.
  virtual Endpoint Listen(const Endpoint& local) = 0;

  /// Connects to `remote`, retrying refused connections and unresolvable
  /// names with exponential backoff until `timeout`, then authenticates.
  /// Returns once the handshake succeeded (OnConnected has run). Throws
  /// Timeout (naming the address and the last error), AuthFailed, IoError.
  virtual ConnectionId Connect(const Endpoint& remote, std::chrono::milliseconds timeout) = 0;

  /// Queues `msg` on connection `id`. Small messages may be written at once
  /// from the calling thread; the rest is written by the transport's thread.
  /// Messages on one connection arrive in the order Send was called. On an
  /// unknown or closed connection, `on_sent` receives the error (or, without
  /// one, the message is dropped). The TCP transport bounds each
  /// connection's queue (docs/transport.md, "Back-pressure"): off its own
  /// thread, and for a message with `may_wait`, Send blocks while the queue
  /// is full and throws Timeout (naming the peer and the bytes queued; the
  /// message is not sent, its on_sent does not run) when no room comes.
  virtual void Send(ConnectionId id, OutgoingMessage msg) = 0;

  /// Closes `id`; pending sends fail; OnDisconnected follows.
  virtual void Close(ConnectionId id) = 0;

  /// The address a connection's peer has as seen from here.
  virtual PeerInfo Peer(ConnectionId id) const = 0;

  /// Stops the transport's thread and closes every connection. Idempotent;
  /// the destructor calls it.
  virtual void Shutdown() = 0;

  /// Lets the calling thread read the connections itself while it waits
  /// (docs/transport.md, "Reading on the waiting thread"): handler callbacks
  /// then run on this thread, still one at a time with the transport's own,
  /// until `done()` is true or `deadline` passes; `done` is looked at, on
  /// this thread and outside any callback, at least every `slice`. The
  /// caller must hold no lock a handler callback takes. Returns false at
  /// once where the transport cannot (one without a loop of its own to
  /// share, another thread already reading, a call from a callback): the
  /// caller then waits its own way. For the first `spin` the thread polls
  /// the connections (yielding the core between looks) before it sleeps.
  virtual bool ReadWhileWaiting(std::chrono::steady_clock::time_point deadline,
                                const std::function<bool()>& done, std::chrono::milliseconds slice,
                                std::chrono::microseconds spin = std::chrono::microseconds(0)) {
    (void)deadline, (void)done, (void)slice, (void)spin;
    return false;
  }
};

}  // namespace tandem::net
