// The TCP implementation of Transport (docs/transport.md).
//
// One EventLoop thread per transport accepts connections, reads every
// socket, runs the handshakes and calls the TransportHandler. Connect()
// resolves and connects in the calling thread (DNS may block for seconds and
// must never stall the loop), retrying with exponential backoff, then hands
// the socket to the loop for the handshake and waits for its outcome.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/environment.h"
#include "base/logger.h"
#include "base/unique_fd.h"
#include "net/deferred_error.h"
#include "net/event_loop.h"
#include "net/send_queue_bound.h"
#include "net/tcp_connection.h"
#include "net/transport.h"

namespace tandem::net {

/// Tuning of the TCP transport beyond TransportOptions.
struct TcpTuning {
  /// First pause between connection attempts; doubles after each failure.
  std::chrono::milliseconds initial_backoff{50};
  /// Longest pause between connection attempts.
  std::chrono::milliseconds max_backoff{2000};
  /// Reads TANDEM_TCP_RTO_MIN_MS (0 to 200) and TANDEM_MAX_INFLIGHT_BYTES.
  /// Throws ConfigError naming the variable.
  static TcpTuning FromEnvironment(const base::Environment& env);
  /// SO_SNDBUF/SO_RCVBUF for every socket; 0 keeps the kernel's autotuning,
  /// which measured faster on loopback (docs/benchmarks.md).
  int socket_buffer_bytes = 0;
  /// What FromEnvironment takes without TANDEM_TCP_RTO_MIN_MS: 10 ms
  /// (docs/transport.md, "Loss", has the measurement).
  static constexpr std::chrono::milliseconds kDefaultRtoMin{10};
  /// TANDEM_TCP_RTO_MIN_MS: the floor of every socket's retransmission
  /// time-out (Linux's TCP_RTO_MIN_US, kernels from 6.15); zero keeps the
  /// kernel's 200 ms. A lower floor shortens the stall after a lost
  /// retransmission on a lossy link (docs/transport.md, "Loss"). A
  /// default-constructed TcpTuning (tests, tools) keeps the kernel's.
  std::chrono::microseconds rto_min{0};
  /// The bound on each connection's send queue and its metrics
  /// (docs/transport.md, "Back-pressure").
  SendQueueBound send_queue;
};

/// Thread-safety: every public method may be called from any thread (see
/// Transport for the exceptions). The connection table is guarded by mu_;
/// listeners and Connect() waiters belong to the loop thread.
/// Connections accepted and not yet authenticated (TcpTransport::Unauthenticated).
struct UnauthenticatedStats {
  size_t now = 0;        ///< open now
  uint64_t dropped = 0;  ///< closed before authenticating, since the start
};

class TcpTransport final : public Transport, private TcpConnectionOwner {
 public:
  /// Starts the transport's loop thread. `handler` and `logger` are
  /// borrowed and must outlive the transport (or its Shutdown()). Throws
  /// IoError when the loop cannot be created.
  TcpTransport(TransportOptions options, TransportHandler* handler, base::Logger& logger,
               TcpTuning tuning = {});
  /// Calls Shutdown(). Must not run on the transport's thread.
  ~TcpTransport() override;
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  /// Binds and listens on `local` ("0.0.0.0", "::" for both families, a
  /// specific address or a name; port 0 picks a free port). May be called
  /// several times for several addresses. Any thread. Throws IoError naming
  /// the address (in use, not an address of this host), Error after Shutdown.
  Endpoint Listen(const Endpoint& local) override;

  /// Connects to `remote` by name or address: refused connections,
  /// unreachable networks and names that do not resolve yet are retried,
  /// with pauses from 50 ms doubling to 2 s, until `timeout`; then runs the
  /// handshake (bounded by TransportOptions::handshake_timeout) and returns
  /// once OnConnected has run. Not from a handler callback. Throws Timeout
  /// (naming the address, the attempts and the last error), AuthFailed (the
  /// server rejected us or failed to prove the secret), ProtocolError (the
  /// server is not a tandem peer of our version), IoError (a failure no retry
  /// can cure), Error after Shutdown.
  ConnectionId Connect(const Endpoint& remote, std::chrono::milliseconds timeout) override;

  /// Queues `msg` on `id`; see Transport::Send and TcpConnection::Send. Any
  /// thread; blocks while the connection's send queue is full (TcpTuning::
  /// send_queue). Throws InvalidArgument for metadata over 4 GiB, Timeout
  /// when no room came within the bound's wait_timeout.
  void Send(ConnectionId id, OutgoingMessage msg) override;

  /// Closes `id`: no further message of it is delivered, queued sends fail,
  /// OnDisconnected follows on the loop thread. Unknown ids are ignored. Any
  /// thread.
  void Close(ConnectionId id) override;

  /// The peer of connection `id` (also inside OnDisconnected). Any thread.
  /// Throws InvalidArgument for an id that is unknown or already gone.
  PeerInfo Peer(ConnectionId id) const override;

  /// Closes listeners and connections (OnDisconnected runs for each
  /// established one with reason "transport shut down"), fails pending
  /// Connect() calls and stops the thread. Idempotent. Not from a handler
  /// callback (throws InvalidArgument there).
  void Shutdown() override;
  bool ReadWhileWaiting(std::chrono::steady_clock::time_point deadline,
                        const std::function<bool()>& done, std::chrono::milliseconds slice,
                        std::chrono::microseconds spin) override;

  /// Accepted connections awaiting authentication, and how many were
  /// dropped before authenticating (refused, timed out, or the oldest past
  /// TransportOptions::max_unauthenticated). Any thread.
  UnauthenticatedStats Unauthenticated() const;

 private:
  struct Listener {
    base::UniqueFd fd;
    FdWatch watch;
    Endpoint bound;
  };

  // TcpConnectionOwner, on the loop thread.
  void OnEstablished(TcpConnection& c) override;
  void OnClosed(TcpConnection& c, const std::string& reason, std::exception_ptr error) override;
  void OnRefused(TcpConnection& c, const std::string& reason) override;

  void OnAcceptable(Listener* listener);
  // Logs the refusal of an unauthenticated peer, rate-limited (loop thread).
  void LogRefusal(const std::string& text);
  // Creates and starts a connection on the loop thread; returns it. A
  // `waiter` learns the outcome of the handshake (Connect() waits on it).
  std::shared_ptr<TcpConnection> Adopt(
      base::UniqueFd fd, PeerInfo peer, std::string peer_name, TcpConnection::Role role,
      std::shared_ptr<std::promise<DeferredError>> waiter = nullptr);
  // Applies the socket options every connection gets. Throws IoError.
  void ConfigureSocket(int fd);
  // Connects the TCP socket, with retries; in the calling thread.
  base::UniqueFd ConnectSocket(const Endpoint& remote, std::chrono::milliseconds timeout,
                               std::string* peer_name, PeerInfo* peer);
  // Sleeps `d` or until Shutdown; returns false on Shutdown.
  bool SleepUnlessShutdown(std::chrono::steady_clock::duration d);
  void CloseEverything();  // loop thread
  std::shared_ptr<TcpConnection> Find(ConnectionId id) const;
  TcpConnection::Context ConnectionContext();

  const TransportOptions options_;
  const TcpTuning tuning_;
  TransportHandler* const handler_;
  base::Logger& logger_;
  std::atomic<ConnectionId> next_id_{1};

  mutable std::mutex mu_;
  std::unordered_map<ConnectionId, std::shared_ptr<TcpConnection>> connections_;  // guarded
  bool shutting_down_ = false;  // guarded; wakes Connect() sleepers
  std::condition_variable shutdown_cv_;

  // Loop thread only.
  std::vector<std::shared_ptr<Listener>> listeners_;
  std::unordered_map<ConnectionId, std::shared_ptr<std::promise<DeferredError>>> connect_waiters_;
  bool closed_everything_ = false;
  // Accepted, not yet authenticated, by id: the smallest is the oldest.
  std::map<ConnectionId, std::weak_ptr<TcpConnection>> unauthenticated_;
  // Refusals of unauthenticated peers are logged one by one up to
  // kRefusalsLogged per kRefusalLogInterval, then summed up in one line.
  std::chrono::steady_clock::time_point refusal_window_start_{};
  int refusals_in_window_ = 0;
  uint64_t refusals_unlogged_ = 0;
  std::string last_unlogged_refusal_;
  bool refusal_summary_armed_ = false;
  uint64_t closed_since_trim_ = 0;  // unauthenticated closes since malloc_trim

  std::atomic<size_t> unauthenticated_now_{0};
  std::atomic<uint64_t> unauthenticated_dropped_{0};

  std::atomic<bool> rto_min_refused_{false};  // warned once that the kernel refused it
  std::mutex shutdown_mu_;                    // serialises Shutdown()
  // Declared last: its thread runs code that uses every member above, and it
  // is stopped in Shutdown() before any of them is destroyed.
  std::unique_ptr<EventLoop> loop_;
};

}  // namespace tandem::net
