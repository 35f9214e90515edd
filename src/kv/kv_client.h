// A worker's connection to the servers (docs/protocol-ps.md): sends the
// requests of store calls, matches replies to them, and fails them when a
// server or the job is lost.
//
// Zero copy: a request's payload is sent straight from the caller's tensors
// (scatter/gather), and a pull's reply is received straight into the
// caller's output (TransportHandler::PayloadDestination).
//
// Priorities: requests wait in a per-server queue ordered by priority (then
// issue order) and go out while fewer than TANDEM_KV_INFLIGHT_BYTES are in
// flight to that server (at least one request always is); a server's
// receipt takes a merged push out of the count before its round ends. Requests of one
// key to one server keep their issue order whatever their priorities, so a
// pull never overtakes the push before it. Servers are independent, so the
// slices of a big key go out in parallel.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "base/op_recorder.h"
#include "base/stats.h"
#include "cluster/node_services.h"
#include "kv/kv_operation.h"
#include "kv/request_window.h"

namespace tandem::kv {

/// One request of a store call to one server.
struct ClientRequest {
  int server = 0;     ///< server rank
  uint16_t type = 0;  ///< kvmsg::k*
  uint64_t key = 0;   ///< for per-key ordering
  int priority = 0;
  std::string meta;
  std::vector<std::span<const std::byte>> payload;  ///< borrowed until sent
  /// Where the reply's payload goes (exactly its size), or empty for a
  /// reply without payload.
  std::span<std::byte> destination;
};

/// Thread-safety: Submit may be called from any thread; handler callbacks
/// run on the transport thread; the request tables are guarded by mu_, and
/// nothing is sent or completed while mu_ is held.
class KvClient final : public net::TransportHandler {
 public:
  struct Options {
    /// TANDEM_KV_INFLIGHT_BYTES (at least kMinInflightBytes from the
    /// environment): per server, bytes of sent requests not yet merged or
    /// answered (header, metadata, payload and the reply's destination;
    /// a parked request only its own bytes); the next request is sent only
    /// while below it, as the server requires (request_window.h).
    uint64_t inflight_bytes = kDefaultInflightBytes;
    /// TANDEM_KV_TIMEOUT (seconds): the default wait of a handle.
    std::chrono::milliseconds timeout{std::chrono::seconds(600)};
    static Options FromEnvironment(const base::Environment& env);
  };

  /// Registers for the kv message types on the dispatcher and listens for
  /// the job's failures. Call before the node registers (in the setup hook).
  KvClient(const cluster::NodeServices& services, Options options);
  ~KvClient() override;

  /// After the join: connects to every server. Throws Timeout, AuthFailed.
  void Start();

  int rank() const { return rank_; }
  /// The workers that are members now (docs/elastic.md: it falls when a
  /// worker leaves an elastic job).
  int num_workers() const { return services_.membership.num_workers(); }
  int num_servers() const { return static_cast<int>(servers_.size()); }
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  const cluster::NodeServices& services() const { return services_; }

  /// Queues `requests` as parts of `op` (which then expects their events).
  /// Throws PeerLost when the job or a needed server is already lost.
  void Submit(const std::shared_ptr<KvOperation>& op, std::vector<ClientRequest> requests);

  std::span<std::byte> PayloadDestination(net::ConnectionId id, const net::Header& h,
                                          const std::string& meta) override;
  void OnMessage(net::ConnectionId id, net::Message&& msg) override;
  void OnDisconnected(net::ConnectionId id, const std::string& reason) override;

 private:
  struct Pending {
    std::shared_ptr<KvOperation> op;
    ClientRequest request;
    uint64_t seq = 0;
    uint64_t request_id = 0;
    uint64_t bytes = 0;          // out + in, for the latency record
    uint64_t wire_bytes = 0;     // out only: what the server books for it
    uint64_t counted = 0;        // what the in-flight window counts now
    bool sent = false;           // handed to the transport
    bool receiving = false;      // the transport writes into destination
    base::SteadyTime submitted;  // for the latency histogram
  };
  struct ServerState {
    std::string name;  // "server 1 (node 2, 127.0.0.1:4000)"
    int node_id = -1;
    net::ConnectionId connection = 0;
    uint64_t inflight = 0;
    // Requests not yet sent: per key FIFO; `ready` holds each key's head.
    std::unordered_map<uint64_t, std::deque<uint64_t>> by_key;      // request ids
    std::priority_queue<std::tuple<int, int64_t, uint64_t>> ready;  // (priority, -seq, id)
    std::optional<std::string> lost;
  };

  // Changes what `s`'s window counts by `delta` bytes. Requires mu_.
  void AddInflight(ServerState& s, int64_t delta);
  // Moves what fits the window out of `server`'s queue; returns it to send.
  std::vector<net::OutgoingMessage> TakeSendable(int server);  // requires mu_
  void SendAll(std::vector<net::OutgoingMessage> msgs, int server);
  void Finish(uint64_t request_id, std::exception_ptr error);
  // A kReceipt: the request waits for other workers; the window counts only
  // what the server still holds for it, and the next requests may go.
  void OnReceipt(const net::Message& msg);
  void FailServer(int server, const std::string& text);
  // The job's failure, waiting up to two heartbeat intervals for it
  // (Membership::AwaitFailure); null when none came.
  std::exception_ptr RootCause() const;
  // Fails every request with the job's failure (Membership's listener).
  void FailAll(const std::exception_ptr& error);

  cluster::NodeServices services_;
  const Options options_;
  // Request latency, submit to reply, by message type (docs/metrics.md).
  base::OpRecorder latency_;
  base::Gauge& outstanding_;   // requests queued or awaiting a reply; set under mu_
  base::Gauge& window_bytes_;  // tandem_kv_window_bytes; set under mu_
  int rank_ = -1;
  int self_id_ = -1;

  std::mutex mu_;
  std::vector<ServerState> servers_;               // by rank; fixed after Start
  std::unordered_map<uint64_t, Pending> pending_;  // by request id
  std::map<net::ConnectionId, int> server_of_connection_;
  std::exception_ptr failure_;  // the job's failure
  uint64_t window_total_ = 0;   // every server's inflight together
  uint64_t next_request_ = 1;
  uint64_t next_seq_ = 1;
};

}  // namespace tandem::kv
