// An in-process Transport, for unit tests that run many nodes in one
// process (docs/transport.md).
//
// Transports attach to an InProcNetwork the test creates and passes in (no
// process-wide registry). Listen registers an address on it, Connect finds
// the address there and checks job id and secret as the handshake would.
// Each transport owns one EventLoop thread: every handler callback and every
// on_sent runs there, as with TCP, so code tested here meets the same
// threading. A message is delivered by posting it to the receiving
// transport's thread, which copies the payload into the posted destination
// (or an allocation) and then lets the sender's on_sent run.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/logger.h"
#include "net/deferred_error.h"
#include "net/event_loop.h"
#include "net/transport.h"

namespace tandem::net {

class InProcTransport;

/// The address space the in-process transports of one test share.
/// Thread-safety: any thread; internally locked. Must outlive every
/// transport attached to it.
class InProcNetwork {
 public:
  InProcNetwork() = default;
  InProcNetwork(const InProcNetwork&) = delete;
  InProcNetwork& operator=(const InProcNetwork&) = delete;

 private:
  friend class InProcTransport;

  // Each returns false when the transport numbered `to` is gone.
  bool PostTo(uint64_t to, std::function<void(InProcTransport&)> fn);
  // Ends one message transport `owner` sent: posts `on_sent(error)` to its
  // thread (when there is a callback) and counts the message settled.
  void SettleSend(uint64_t owner, std::function<void(std::exception_ptr)> on_sent,
                  std::exception_ptr error);
  uint64_t Attach(InProcTransport* t);
  // Removes every address `number` listens on: connects to it fail from now.
  void Unbind(uint64_t number);
  // Removes `number`; no task reaches it afterwards.
  void Detach(uint64_t number);
  // Registers `local` for transport `number`; picks a port when it is 0.
  // Throws IoError when the address is taken.
  Endpoint Bind(const Endpoint& local, uint64_t number);
  // The transport listening on `remote`, or 0.
  uint64_t Lookup(const Endpoint& remote);

  std::mutex mu_;
  std::unordered_map<uint64_t, InProcTransport*> transports_;  // guarded by mu_
  std::map<std::string, uint64_t> listeners_;                  // guarded by mu_
  std::map<std::string, uint16_t> next_port_;                  // guarded by mu_
  uint64_t next_number_ = 1;                                   // guarded by mu_
};

/// Thread-safety: as Transport. Connection state is guarded by mu_; handler
/// callbacks run on the transport's loop thread.
class InProcTransport final : public Transport {
 public:
  /// Attaches to `network` and starts the delivery thread. `handler`,
  /// `logger` and `network` are borrowed and must outlive the transport.
  InProcTransport(InProcNetwork& network, TransportOptions options, TransportHandler* handler,
                  base::Logger& logger);
  /// Calls Shutdown(). Must not run on the transport's thread.
  ~InProcTransport() override;
  InProcTransport(const InProcTransport&) = delete;
  InProcTransport& operator=(const InProcTransport&) = delete;
  friend class InProcNetwork;  // posts tasks to our loop

  /// Registers `local` (any host string; port 0 picks a free one) on the
  /// network. Any thread. Throws IoError when the address is taken, Error
  /// after Shutdown.
  Endpoint Listen(const Endpoint& local) override;

  /// Finds the listener of `remote`, retrying until `timeout` while there is
  /// none, then checks job id and secret. Returns once OnConnected has run.
  /// Not from a callback. Throws Timeout (naming the address), AuthFailed
  /// (the listener has another job id or secret), Error after Shutdown.
  ConnectionId Connect(const Endpoint& remote, std::chrono::milliseconds timeout) override;

  /// Hands `msg` to the peer's thread; see Transport::Send. Any thread.
  void Send(ConnectionId id, OutgoingMessage msg) override;

  /// Closes `id`; both ends get OnDisconnected. Any thread.
  void Close(ConnectionId id) override;

  /// The peer of `id`. Any thread. Throws InvalidArgument for unknown ids.
  PeerInfo Peer(ConnectionId id) const override;

  /// Detaches from the network, closes every connection (OnDisconnected on
  /// both ends) and stops the thread. Idempotent; not from a callback.
  void Shutdown() override;

 private:
  struct Connection {
    PeerInfo peer;
    std::string peer_name;
    uint64_t peer_transport = 0;
    ConnectionId peer_id = 0;
    bool established = false;
    bool closing = false;  // Close() was called; deliver nothing more
    bool closed = false;   // CloseConnection() is running
    std::shared_ptr<std::promise<DeferredError>> connect_done;  // until established
  };

  // Loop-thread halves of the protocol between two transports.
  void Accept(uint64_t client, ConnectionId client_id, const std::string& job_id,
              const std::string& secret, const Endpoint& client_address,
              const std::string& server_name);
  void CompleteConnect(ConnectionId id, uint64_t server, ConnectionId server_id);
  void FailConnect(ConnectionId id, DeferredError error);
  void Deliver(ConnectionId id, OutgoingMessage& msg, uint64_t sender);
  // What the far end of a closed connection is told.
  enum class PeerNotice { kNone, kClosed, kShutDown };
  // Forgets `id`, runs OnDisconnected with `reason`, and posts `notice` to
  // the peer's transport.
  void CloseConnection(ConnectionId id, const std::string& reason, PeerNotice notice);
  // The peer closed its end of `id`.
  void OnPeerClosed(ConnectionId id, PeerNotice notice);
  void CloseEverything();
  // Calls `on_sent(error)`, logging what it throws.
  static void RunOnSent(const std::function<void(std::exception_ptr)>& on_sent,
                        std::exception_ptr error, base::Logger& logger);
  // Runs `on_sent(error)` on this transport's thread, for a message that
  // never left (inline once the thread has stopped).
  void FailLocally(std::function<void(std::exception_ptr)> on_sent, std::exception_ptr error);
  // A peer settled one of the messages counted in sends_out_.
  void OnSendSettled();
  bool SleepUnlessShutdown(std::chrono::steady_clock::duration d);

  InProcNetwork& network_;
  const TransportOptions options_;
  TransportHandler* const handler_;
  base::Logger& logger_;
  uint64_t number_ = 0;
  std::string name_;  // "inproc-<number>", this transport's host as peers see it

  mutable std::mutex mu_;
  std::unordered_map<ConnectionId, Connection> connections_;  // guarded by mu_
  ConnectionId next_id_ = 1;                                  // guarded by mu_
  bool shutting_down_ = false;                                // guarded by mu_
  std::condition_variable shutdown_cv_;
  bool closed_everything_ = false;  // loop thread only

  // Messages handed to a peer's thread whose on_sent has not been posted
  // back yet. Shutdown waits for none before it detaches, so that a
  // callback a peer still owes reaches this transport's thread instead of
  // being lost (docs/transport.md, "Threading model").
  std::mutex sends_mu_;
  std::condition_variable sends_cv_;
  uint64_t sends_out_ = 0;  // guarded by sends_mu_

  std::mutex shutdown_mu_;
  std::unique_ptr<EventLoop> loop_;  // last: stopped before the rest is destroyed
};

}  // namespace tandem::net
