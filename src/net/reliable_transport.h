// Reliable delivery over another Transport: message ids, acks, resend,
// duplicate suppression with bounded memory, in-order delivery, and a clear
// error once a message's retry budget is spent (PS_RESEND=1).
//
// docs/protocol-resend.md is the normative description of the protocol; this
// file implements it. In short, per connection and per direction:
//
//   sender                                   receiver
//   id := next_id++  (1, 2, 3, ...)
//   data(id)  ───────────────────────────▶   id <  expected        duplicate: drop, ack
//                                            id == expected        deliver, then every held
//                                                                  successor in order; ack
//                                            id in (expected,      hold (transport-allocated
//                                                expected+window)  copy); ack
//                                            id >= expected+window protocol violation
//             ◀───────────────────────────   ack(expected, held ids)
//   every id < expected and every listed id is acknowledged: the caller's
//   on_sent runs (payload memory free again).
//   An unacknowledged id is sent again PS_RESEND_TIMEOUT ms after its last
//   copy was handed to the kernel; after TANDEM_RESEND_RETRIES resends the
//   connection is closed and the message fails with Timeout.
//
// Bounded dedup (the invariant): a receiver remembers, per connection, only
// `expected` (every id below it was delivered) and the held ids above it, all
// smaller than expected + window. An id is a duplicate iff it is below
// `expected` or held. The sender never has an id outstanding at or beyond
// (highest cumulative ack + window), so the held set never exceeds window - 1
// entries, however many messages flow (ps-lite remembered every id forever).
//
// Zero-copy: the inner transport reads each copy straight from the caller's
// spans, so the caller's on_sent runs only once the message is acknowledged
// AND no copy is still queued in the inner transport. Cost: on_sent comes one
// round trip later than without resend, and a caller that recycles buffers in
// on_sent keeps them one round trip longer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>

#include "base/clock.h"
#include "base/config.h"
#include "base/logger.h"
#include "net/transport.h"

namespace tandem::net {

/// Settings of the reliable layer; see docs/protocol-resend.md.
struct ReliableOptions {
  /// PS_RESEND_TIMEOUT: wait for an ack this long after a copy reached the
  /// kernel before sending the message again.
  std::chrono::milliseconds resend_timeout{1000};
  /// TANDEM_RESEND_RETRIES: resends of one message before the connection is
  /// given up (so at most retries + 1 copies are sent).
  int max_retries = 10;
  /// TANDEM_RESEND_WINDOW: most unacknowledged messages per connection and
  /// direction; also bounds what a receiver holds out of order.
  uint32_t window = 1024;
  /// PS_DROP_MSG (tests only): percentage (0..100) of received data messages
  /// and acks discarded as if lost.
  int drop_percent = 0;
  /// TANDEM_DROP_SEED: seed of the drop decisions; 0 picks a random seed.
  uint64_t drop_seed = 0;

  /// The reliable-layer fields of `config`.
  static ReliableOptions FromConfig(const base::Config& config);
};

/// Counters for tests and logs. Monotonic unless named "now".
struct ReliableStats {
  uint64_t data_sent = 0;  ///< first copies of data messages
  uint64_t resent = 0;     ///< further copies
  uint64_t acks_sent = 0;
  uint64_t duplicates = 0;   ///< received copies of ids already delivered or held
  uint64_t dropped = 0;      ///< discarded by the PS_DROP_MSG hook
  uint64_t delivered = 0;    ///< data messages handed to the upper handler
  uint64_t held_now = 0;     ///< out-of-order messages held now, all connections
  uint64_t held_max = 0;     ///< the most ever held on one connection at once
  uint64_t unacked_now = 0;  ///< messages sent and not yet acknowledged
  uint64_t waiting_now = 0;  ///< messages queued behind a full window
};

/// A Transport that adds ack/resend/dedup to `inner`. Build it with a
/// factory for the inner transport: the inner one must call back into this
/// object, so it is made inside the constructor with this object as its
/// handler.
///
/// Threads: the inner transport's loop thread runs every handler callback
/// (ours and, through us, the upper handler's) and the ack processing; one
/// resend thread owned here scans for expired messages; Send may come from any
/// thread. Connection state is guarded by mu_; per connection, send_mu keeps
/// id assignment and the inner Send in the same order (taken before mu_).
/// The drop RNG is touched on the inner loop thread only.
///
/// Time: resend deadlines, the resend thread's scans and the give-up after
/// AbandonUnacknowledged run on the clock given to the constructor
/// (base/clock.h), so tests count resends on a ManualClock; Shutdown's
/// linger is a grace period before the process goes and waits in real time.
class ReliableTransport final : public Transport, private TransportHandler {
 public:
  using InnerFactory = std::function<std::unique_ptr<Transport>(TransportHandler*)>;

  /// Builds the inner transport with `make_inner(this-as-handler)` and starts
  /// the resend thread. `upper`, `logger` and `clock` are borrowed and must
  /// outlive this object; a null `clock` is the real monotonic clock. Throws
  /// InvalidArgument on unusable options.
  ReliableTransport(ReliableOptions options, TransportHandler* upper, base::Logger& logger,
                    const InnerFactory& make_inner, const base::Clock* clock = nullptr);
  /// Calls Shutdown(). Not from a callback.
  ~ReliableTransport() override;
  ReliableTransport(const ReliableTransport&) = delete;
  ReliableTransport& operator=(const ReliableTransport&) = delete;

  /// As the inner transport's Listen. Any thread.
  Endpoint Listen(const Endpoint& local) override;
  /// As the inner transport's Connect. Not from a callback.
  ConnectionId Connect(const Endpoint& remote, std::chrono::milliseconds timeout) override;
  /// Numbers `msg`, sends it, and keeps it until acknowledged; its on_sent
  /// runs once acknowledged (nullptr), or with PeerLost when the connection
  /// ends first, or with Timeout when its retry budget ran out. The payload
  /// stays borrowed until then. `msg.header.message_id` is replaced. Any
  /// thread.
  void Send(ConnectionId id, OutgoingMessage msg) override;
  /// As the inner transport's Close; unacknowledged messages fail with
  /// PeerLost. Any thread.
  void Close(ConnectionId id) override;
  /// As the inner transport's Peer. Any thread.
  PeerInfo Peer(ConnectionId id) const override;
  /// Lingers until every message sent is acknowledged (at most the retry
  /// budget's time in real time: PS_RESEND_TIMEOUT x (TANDEM_RESEND_RETRIES +
  /// 1)), stops
  /// the resend thread, then shuts the inner transport down (what is still
  /// unacknowledged fails) and logs the counters at PS_VERBOSE=1.
  /// Idempotent; not from a callback.
  void Shutdown() override;

  /// For a process whose job has failed: its unacknowledged messages go to
  /// peers that are lost or cut off, and waiting for their acks would only
  /// delay its exit by the whole retry budget (docs/protocol-resend.md,
  /// "After a failure"). From now on a message still unacknowledged one
  /// PS_RESEND_TIMEOUT after it was sent is not resent: its connection is
  /// given up (what is unacknowledged on it fails with PeerLost, releasing
  /// the callers' payloads), and Shutdown() does not linger (a linger under
  /// way ends). Any thread, callbacks included (it only sets a flag); never
  /// throws.
  void AbandonUnacknowledged() noexcept;

  /// A snapshot of the counters. Any thread.
  ReliableStats Stats() const;

 private:
  struct Pending;
  struct Connection;

  // TransportHandler, called by the inner transport on its loop thread.
  void OnConnected(ConnectionId id, const PeerInfo& peer) override;
  std::span<std::byte> PayloadDestination(ConnectionId id, const Header& h,
                                          const std::string& meta) override;
  void OnMessage(ConnectionId id, Message&& msg) override;
  void OnDisconnected(ConnectionId id, const std::string& reason) override;

  void OnData(ConnectionId id, Message&& msg);
  void OnAck(ConnectionId id, Message&& msg);
  // One drop decision of the PS_DROP_MSG hook. Loop thread.
  bool DecideDrop();
  // Sends a copy of `p` through the inner transport. No lock of ours held
  // except the connection's send_mu for first copies.
  void SendCopy(ConnectionId id, const std::shared_ptr<Pending>& p);
  void OnCopySent(const std::shared_ptr<Pending>& p, std::exception_ptr error);
  // Moves messages queued behind the window into flight. Loop or app thread.
  void DrainWaiting(ConnectionId id, const std::shared_ptr<Connection>& c);
  // Tells the peer what `c` has received. Loop thread.
  void SendAck(ConnectionId id, uint64_t expected, const std::vector<uint64_t>& held);
  // Runs the caller's on_sent for every finished message. No lock held.
  static void Finish(std::vector<std::shared_ptr<Pending>>& done, base::Logger& log);
  void ResendLoop();
  // True when no connection has unacknowledged or waiting messages.
  bool AllSettledLocked() const;

  const ReliableOptions options_;
  TransportHandler* const upper_;
  base::Logger& logger_;
  base::SteadyClock steady_clock_;  // clock_ when the constructor got none
  const base::Clock& clock_;

  mutable std::mutex mu_;
  std::unordered_map<ConnectionId, std::shared_ptr<Connection>> connections_;  // guarded by mu_
  ReliableStats stats_;                                                        // guarded by mu_
  bool stopping_ = false;                                                      // guarded by mu_
  bool abandoned_ = false;  // AbandonUnacknowledged was called; guarded by mu_
  std::condition_variable resend_cv_;
  std::condition_variable settled_cv_;  // an unacknowledged message settled

  std::mt19937_64 drop_rng_;  // inner loop thread only

  std::mutex shutdown_mu_;
  bool logged_summary_ = false;  // guarded by shutdown_mu_
  std::thread resend_thread_;
  std::unique_ptr<Transport> inner_;  // built last, shut down first
};

}  // namespace tandem::net
