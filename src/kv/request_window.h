// The bound on what one worker may have outstanding at one server
// (docs/kvstore.md, "Bounded memory"): request bytes, as on the wire
// (64-byte header, metadata, payload), that a server has received from a
// connection and still holds: queued for a shard, or parked until the
// worker's current dist_sync round of the key ends. A push merged into its
// round leaves the books at once (its bytes live on only in the round's
// sum) and the worker is told with a receipt (kvmsg::kReceipt).
//
// Both ends apply the same rule with the same bound, TANDEM_KV_INFLIGHT_BYTES:
// the worker's KvClient sends a request only while its counted bytes toward
// that server are below the bound (or none are), counting at least what the
// server holds; the server releases before the worker learns of it (receipt
// or answer), and books after the worker counted. So what a server holds
// for a connection is never more than what that worker counts, and a correct
// worker is never refused. A worker's window never waits on the order in
// which other workers send: what it counts is on its way to a shard, parked
// behind its own push of the key, or an answer under way. A worker that
// ignores the rule (another implementation, a bug) gets its excess requests
// refused with an error, and the server's memory stays bounded.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/stats.h"
#include "net/transport.h"

namespace tandem::kv {

/// TANDEM_KV_INFLIGHT_BYTES's default: bytes per worker and server.
inline constexpr uint64_t kDefaultInflightBytes = uint64_t{64} << 20;
/// TANDEM_KV_INFLIGHT_BYTES's least value: room for some 500 parked pulls
/// (docs/kvstore.md, "Bounded memory").
inline constexpr uint64_t kMinInflightBytes = uint64_t{64} << 10;

/// The request bytes a server holds per connection. Thread-safety: any
/// thread (Admit runs on the transport thread, Release on shard threads);
/// guarded by an internal mutex.
class RequestWindow {
 public:
  /// `max_bytes` >= 1. `held` (tandem_kv_server_inflight_bytes) and
  /// `refused` (tandem_kv_server_refused_requests_total) may be null.
  RequestWindow(uint64_t max_bytes, base::Gauge* held, base::Counter* refused);

  /// Takes request `request_id` of `bytes` bytes on connection `c` into the
  /// books when the connection holds nothing or less than the bound; returns
  /// an empty string then. Otherwise returns why it was refused (the bytes
  /// held, the request's, the bound and the setting) and books nothing.
  std::string Admit(net::ConnectionId c, uint64_t request_id, uint64_t bytes);

  /// Request `request_id` of `c` is being answered, or was merged into its
  /// round: its bytes leave the books. Unknown requests are ignored. Call
  /// before sending the reply or the receipt.
  void Release(net::ConnectionId c, uint64_t request_id);

  /// The connection is gone: everything it held leaves the books.
  void Forget(net::ConnectionId c);

  /// Bytes held for `c` now.
  uint64_t held(net::ConnectionId c) const;

  uint64_t max_bytes() const { return max_bytes_; }

 private:
  struct Books {
    uint64_t bytes = 0;
    std::unordered_map<uint64_t, uint64_t> requests;  // request id -> bytes
  };

  const uint64_t max_bytes_;
  base::Gauge* const held_gauge_;
  base::Counter* const refused_;
  mutable std::mutex mu_;
  std::unordered_map<net::ConnectionId, Books> books_;  // guarded by mu_
};

}  // namespace tandem::kv
