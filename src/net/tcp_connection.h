// One TCP connection of a TcpTransport: its socket, its frame reader, its
// handshake and its send queue (docs/transport.md). One class, its member
// functions defined by idea:
//
// - tcp_connection.cc: the life cycle (start, the handshake's stages,
//   establishment, failure and closing) and the frames it delivers;
// - tcp_connection_send_queue.cc: the send queue, its writers and
//   back-pressure;
// - tcp_connection_tls.cc: the TLS pump (encrypting the queue, decrypting
//   into the frame reader, refusing a peer that speaks the other protocol);
// - tcp_connection_reading.cc: reading the socket, the receive low-water
//   mark, and the end of the stream.
//
// Life cycle: [TLS handshake ->] HMAC handshake -> established -> closed. With
// TransportOptions::tls, a new connection first runs TLS 1.3 with mutual
// certificate checks (net/tls_session.h) and everything after it travels
// encrypted. Then it runs the HMAC handshake (net/hmac_handshake.h) with
// HandshakeLimits(); both within one deadline. Only then does the transport
// learn of it (OnEstablished) and its frames reach the TransportHandler. Any
// failure closes the connection and nothing else.
//
// Sending: Send() appends to a FIFO queue under the connection's mutex. When
// the queue was idle the calling thread writes at once with sendmsg(),
// gathering [header][meta][payload spans...] of as many queued messages as
// fit one call, straight from the callers' memory; what the kernel does not
// take waits for EPOLLOUT and is written by the loop thread. A message with
// an on_sent callback from a thread other than the loop's is handed to the
// loop instead (a flush task), since its callback must run there anyway;
// sends arriving before that task ran pile up behind it and leave in one
// sendmsg(). Invariant: a non-empty queue has EPOLLOUT armed or a flush task
// posted (or the connection is closing).
//
// With TLS the same queue and the same writers apply; the writer encrypts
// queued pieces into the session (small pieces gathered into one record,
// large ones encrypted in place) and sends the ciphertext, and on_sent runs
// once a message is encrypted. The reader reads ciphertext into the session
// and decrypts into the frame reader's span, so a posted buffer still
// receives the payload directly (docs/transport.md, "TLS").
//
// Back-pressure (docs/transport.md, "Back-pressure"): the queue holds at most
// SendQueueBound::max_queued_bytes (header, metadata and payload of messages
// not completely written; one larger message alone is allowed). A sender on
// another thread than the loop's waits for room, at most wait_timeout, then
// Send throws Timeout naming the peer and the bytes queued. The loop thread
// never waits: it is the one that drains the queue.
#pragma once

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/logger.h"
#include "base/unique_fd.h"
#include "net/event_loop.h"
#include "net/frame_reader.h"
#include "net/hmac_handshake.h"
#include "net/send_queue_bound.h"
#include "net/tls_session.h"
#include "net/transport.h"

namespace tandem::net {

class TcpConnection;

/// What a TcpConnection reports to the transport that owns it. Both
/// callbacks run on the loop thread, each at most once per connection.
class TcpConnectionOwner {
 public:
  virtual ~TcpConnectionOwner() = default;
  /// The handshake succeeded; messages may flow.
  virtual void OnEstablished(TcpConnection& c) = 0;
  /// The connection is closed and its socket released. `reason` names the
  /// peer and the cause; `error` is the same as an exception (AuthFailed,
  /// ProtocolError, Timeout, PeerLost, Error), for a Connect() waiting on a
  /// connection that never got established.
  virtual void OnClosed(TcpConnection& c, const std::string& reason, std::exception_ptr error) = 0;
  /// An accepted connection is dropped before it authenticated (a refused
  /// handshake, a time-out): the owner logs it, rate-limited, since a
  /// hostile peer can make any number of them. OnClosed follows.
  virtual void OnRefused(TcpConnection& c, const std::string& reason) = 0;
};

/// Thread-safety: the read side, the handshake and the life cycle belong to
/// the loop thread; Send() and RequestClose() may be called from any thread;
/// the send queue and the socket's write side are guarded by mu_.
class TcpConnection final : public FrameSink, public std::enable_shared_from_this<TcpConnection> {
 public:
  enum class Role { kClient, kServer };

  /// What a connection borrows from its transport; all must outlive it.
  struct Context {
    EventLoop* loop;
    TransportHandler* handler;
    TcpConnectionOwner* owner;
    base::Logger* logger;
    const TransportOptions* options;
    const SendQueueBound* send_queue;
  };

  /// Takes a connected, non-blocking socket. `peer_name` names the peer in
  /// messages (for outbound connections the address the caller asked for and
  /// the one it resolved to). Any thread; does no I/O.
  TcpConnection(ConnectionId id, base::UniqueFd fd, PeerInfo peer, std::string peer_name, Role role,
                Context ctx);
  ~TcpConnection() override;

  /// Registers the socket with the loop, arms the handshake deadline and,
  /// for a client, sends the hello. Loop thread. Throws IoError when the
  /// socket cannot be registered.
  void Start();

  /// Queues `msg` (see the file comment); fills in its lengths. When the
  /// connection is not established or already closed, `on_sent` receives
  /// PeerLost on the loop thread. Any thread; off the loop thread, and when
  /// `msg.may_wait`, blocks while the send queue is full. Throws
  /// InvalidArgument when the metadata exceeds the header's 32-bit length
  /// field; Timeout when no room came within the bound's wait_timeout (the
  /// message was not queued and its on_sent will not run).
  void Send(OutgoingMessage msg);

  /// Bytes queued and not yet written (header, metadata, payload of every
  /// message not completely written). Any thread.
  uint64_t queued_bytes() const;

  /// Asks for the connection to be closed with `reason`: frames not yet
  /// delivered are dropped from now on, and the loop closes the socket soon.
  /// Any thread; idempotent.
  void RequestClose(std::string reason);

  /// Closes the socket now, fails queued sends with PeerLost(reason) and
  /// reports OnClosed. Loop thread; idempotent; never throws.
  void Close(const std::string& reason, std::exception_ptr error);

  ConnectionId id() const { return id_; }
  const PeerInfo& peer() const { return peer_; }
  /// The peer as error messages name it.
  const std::string& peer_name() const { return peer_name_; }
  /// True once the handshake succeeded (stays true after closing).
  bool established() const { return established_.load(std::memory_order_acquire); }

  // FrameSink, called by reader_ on the loop thread.
  std::span<std::byte> PayloadDestination(const Header& h, const std::string& meta) override;
  void OnFrame(Message&& msg) override;

 private:
  enum class Stage {
    kTlsHandshake,
    kClientAwaitChallenge,
    kClientAwaitWelcome,
    kServerAwaitHello,
    kServerAwaitProof,
    kEstablished
  };

  // One queued message and how far it has been written. Pieces are numbered
  // 0 = header, 1 = meta, 2.. = payload spans.
  struct PendingSend {
    OutgoingMessage msg;
    std::array<std::byte, kHeaderSize> header;
    size_t piece = 0;
    size_t offset = 0;   // bytes of `piece` already written
    uint64_t bytes = 0;  // header + meta + payload, as counted in queued_bytes_
    int role = 0;        // SendQueueMeter::RoleOf the recipient (with a meter)
    size_t piece_count() const { return 2 + msg.payload.size(); }
    std::span<const std::byte> Piece(size_t i) const;
  };
  using Completions = std::vector<std::function<void(std::exception_ptr)>>;

  // The frame reader's staging buffer once authenticated; spans larger
  // than this are direct reads.
  static constexpr size_t kStagingBytes = 256 * 1024;
  // Until then: the handshake's frames (a header and at most 512 bytes of
  // metadata) fit, and a peer that never authenticates costs this, not
  // kStagingBytes (docs/protocol-handshake.md, "Resources").
  static constexpr size_t kHandshakeStagingBytes = 1024;

  // Life cycle (tcp_connection.cc).
  void OnEvents(uint32_t events);
  void OnHandshakeTimeout();
  void Establish();
  // Closes because of an exception thrown while reading or handshaking.
  void Fail(std::exception_ptr error);

  // Reading (tcp_connection_reading.cc).
  void OnReadable();
  // The `got` bytes were read into the frame reader's span (plaintext) or
  // the session's (TLS): hands them on. False when the connection closed.
  bool TakePlaintext(std::span<const std::byte> got);
  // End of stream (err 0) or a read error: closes with the reason.
  void OnEndOfStream(int err);
  // Sets SO_RCVLOWAT for what the reader waits for next (see the .cc).
  void UpdateReceiveLowWater();

  // The TLS pump (tcp_connection_tls.cc).
  bool TakeCiphertext(std::span<const std::byte> got);
  // Decrypts what the session holds (advancing its handshake first) into
  // the frame reader. Returns false when the connection closed.
  bool DrainTls();
  // Before closing for a TLS failure: sends the alert OpenSSL produced, so
  // that the peer learns why (best effort, never blocks).
  void SendTlsAlert();
  // The TLS handshake completed: starts the HMAC handshake inside it.
  void OnTlsEstablished();
  // A plaintext node's first bytes from the peer: a TLS record means the
  // peer runs with TANDEM_TLS=1. Returns true (after closing) in that case.
  bool RefusePeerSpeakingTls(std::span<const std::byte> first);
  // A TLS node's first bytes from the peer: a tandem frame means the peer
  // runs without TLS. Returns true (after closing) in that case.
  bool RefusePeerSpeakingPlaintext(std::span<const std::byte> first);
  // FlushLocked with TLS: sends ciphertext, encrypts more, until done or the
  // socket is full.
  void FlushTlsLocked(Completions& done);
  // Encrypts queued pieces until the queue is empty or the session's buffer
  // is full; returns true when it produced ciphertext. Requires mu_. Throws
  // what TlsSession::Encrypt throws.
  bool EncryptQueuedLocked(Completions& done);

  // The send queue (tcp_connection_send_queue.cc).
  // Writes what is pending (EPOLLOUT, output the reader produced, or with
  // `posted_flush` the task a non-loop sender posts) and runs the on_sent
  // callbacks of what got written, or failed. Loop thread.
  void OnWritable(bool posted_flush = false);
  // PeerLost for a message not sent because of `why`.
  std::exception_ptr NotSent(const std::string& why) const;
  // Enqueues `msg` whatever the stage (handshake frames use this directly);
  // waits for room first when `may_wait` (see the file comment).
  void Enqueue(OutgoingMessage msg, bool may_wait);
  // Waits, with `lock` held on mu_, until `bytes` more fit the bound or
  // writing stopped. Throws Timeout.
  void WaitForRoomLocked(std::unique_lock<std::mutex>& lock, uint64_t bytes, int role);
  // Takes `p` off the books of queued_bytes_ and the meter. Requires mu_.
  void ReleaseLocked(const PendingSend& p);
  // Empties the queue after writing stopped: moves its on_sent callbacks to
  // `failed` and wakes waiting senders. Requires mu_.
  void DropQueueLocked(Completions& failed);
  // Writes queued messages until the queue is empty or the socket is full;
  // arms or disarms EPOLLOUT to match. Requires mu_. Appends finished
  // messages' callbacks to `done`. On a write error, sets write_closed_ and
  // write_error_ and posts the Close; the caller then fails the queue.
  void FlushLocked(Completions& done);
  // One sendmsg() of `iov`, retried on EINTR. Returns the bytes the kernel
  // took, or -1 after arming EPOLLOUT (socket full) or stopping writes (an
  // error); the caller then returns. Requires mu_.
  ssize_t SendLocked(iovec* iov, size_t count);
  // Moves the queue's cursors over `n` bytes written (or encrypted, or
  // gathered); finished messages' callbacks go to `done`. Requires mu_.
  void AdvanceLocked(size_t n, Completions& done);
  // Stops writing for good with `reason` and posts the Close. Requires mu_.
  void StopWritingLocked(std::string reason);
  void SetWantWriteLocked(bool want);
  // Posts `done` to run on the loop thread with `error` (nullptr: success).
  void Complete(Completions done, std::exception_ptr error);
  // Runs `done` now; loop thread, never inside a caller's Send().
  void RunCompletions(Completions& done, std::exception_ptr error);

  const ConnectionId id_;
  const PeerInfo peer_;
  const std::string peer_name_;
  const Role role_;
  const Context ctx_;

  // Loop thread only.
  std::unique_ptr<FrameReader> reader_;
  Stage stage_;
  std::optional<ClientHandshake> client_handshake_;
  std::optional<ServerHandshake> server_handshake_;
  EventLoop::TimerId handshake_timer_ = 0;
  bool closed_ = false;
  int rcvlowat_ = 1;           // the socket's SO_RCVLOWAT
  bool tls_received_ = false;  // any ciphertext arrived (for mismatch reports)

  std::atomic<bool> established_{false};
  std::atomic<bool> close_requested_{false};

  // Guarded by mu_. fd_ and watch_ change only on the loop thread (under
  // mu_, when closing), so the loop thread reads them without the lock.
  mutable std::mutex mu_;
  base::UniqueFd fd_;
  FdWatch watch_;
  bool registered_ = false;
  bool want_write_ = false;
  bool write_closed_ = false;  // no further writes: closed, or a write failed
  std::string write_error_;    // why writes stopped, for late senders
  std::deque<PendingSend> queue_;
  uint64_t queued_bytes_ = 0;        // sum of queue_[i].bytes
  std::condition_variable room_cv_;  // queued_bytes_ fell, or writing stopped
  // An OnWritable(true) task is queued on the loop and will write the queue,
  // so senders only append meanwhile.
  bool flush_posted_ = false;
  // With TLS: small pieces gathered for one SSL_write, and how much of them
  // the session took. A partly taken buffer is passed again unchanged, as
  // OpenSSL requires after a full buffer.
  std::vector<std::byte> plain_;
  size_t plain_taken_ = 0;

  // Set in Start() before any other thread can reach the connection, then
  // only read; the session serialises its own use.
  std::unique_ptr<TlsSession> tls_;
};

}  // namespace tandem::net
