// tandem's tuning and debugging knobs, parsed once from the environment.
//
// Where (role, rank, scheduler address) comes from lives in src/cluster/ (the
// start-up contracts); this struct holds how a process behaves. Every field
// names its variable; docs/environment.md is the user's table of them.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "base/environment.h"
#include "base/wait_report.h"

namespace tandem::base {

struct Config {
  /// PS_VERBOSE: 1 adds connections, node ids and barriers, 2 every message.
  int verbose = 0;
  /// PS_VERBOSE=0 given explicitly: only warnings and errors are printed.
  /// Unset keeps the start-up lines (role, contract, addresses) as well.
  bool quiet = false;

  /// PS_HEARTBEAT_INTERVAL (seconds): how often a node tells the scheduler it lives.
  std::chrono::milliseconds heartbeat_interval{std::chrono::seconds(1)};
  /// PS_HEARTBEAT_TIMEOUT (seconds): silence after which the scheduler declares a node dead.
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(10)};

  /// TANDEM_SECRET: the per-job secret of the HMAC handshake. `tandem launch`
  /// generates one; a job started by other means must set the same value on
  /// every process. A process joining a job refuses to start without one
  /// unless `insecure` (cluster/job_secret_requirement.h).
  std::string secret;
  /// TANDEM_INSECURE=1: a job may run without TANDEM_SECRET (an empty HMAC
  /// key), on a trusted network only.
  bool insecure = false;
  /// TANDEM_JOB_ID: names the job in the handshake, so two jobs sharing a
  /// secret still cannot join each other.
  std::string job_id = "tandem";

  /// TANDEM_CONNECT_TIMEOUT (seconds): how long to retry connecting to a peer
  /// (and resolving its name) before giving up.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(120)};
  /// TANDEM_HANDSHAKE_TIMEOUT (seconds): how long a new connection may take to
  /// authenticate before it is dropped.
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(10)};
  /// TANDEM_MAX_UNAUTHENTICATED (net::TransportOptions::max_unauthenticated).
  int64_t max_unauthenticated = 1024;
  /// TANDEM_START_TIMEOUT (seconds): how long the scheduler waits for every
  /// expected node to register, and a node for the node table.
  std::chrono::milliseconds start_timeout{std::chrono::seconds(300)};
  /// TANDEM_BARRIER_TIMEOUT (seconds): how long a barrier may wait for its
  /// members.
  std::chrono::milliseconds barrier_timeout{std::chrono::seconds(600)};
  /// TANDEM_WAIT_REPORT_SECONDS (seconds): how often a wait for another
  /// process (a store call, a barrier, the node table, a connection, a
  /// collective's pieces) logs what it still waits for (base/wait_report.h).
  std::chrono::milliseconds wait_report_interval = kDefaultWaitReportInterval;

  /// TANDEM_MAX_META_BYTES: the largest metadata section a peer may send.
  uint32_t max_meta_bytes = 16u << 20;
  /// TANDEM_MAX_PAYLOAD_BYTES: the largest payload a peer may send.
  uint64_t max_payload_bytes = uint64_t{16} << 30;

  /// PS_RESEND: 1 wraps every connection in reliable delivery (acks, resend,
  /// dedup; docs/protocol-resend.md). Must be equal on every process.
  bool resend = false;
  /// PS_RESEND_TIMEOUT (milliseconds): wait for an ack this long before
  /// sending a message again.
  std::chrono::milliseconds resend_timeout{1000};
  /// TANDEM_RESEND_RETRIES: resends of one message before its connection is
  /// given up with an error naming the peer, the message type and its id.
  int resend_retries = 10;
  /// TANDEM_RESEND_WINDOW: most unacknowledged messages per connection and
  /// direction (bounds the receiver's dedup state).
  uint32_t resend_window = 1024;
  /// PS_DROP_MSG (tests only): percentage of received messages the reliable
  /// layer discards as if lost. Only with PS_RESEND=1.
  int drop_percent = 0;
  /// TANDEM_DROP_SEED: seed of PS_DROP_MSG's decisions (0: random).
  uint64_t drop_seed = 0;

  /// TANDEM_TLS: 1 runs TLS 1.3 with mutual certificate checks on every TCP
  /// connection, under the HMAC handshake (docs/transport.md, "TLS"). Must
  /// be equal on every process of a job.
  bool tls = false;
  /// TANDEM_TLS_CERT, TANDEM_TLS_KEY, TANDEM_TLS_CA: PEM files of this
  /// process's certificate (and intermediates), its private key, and the CA
  /// every peer's certificate must chain to. Required with TANDEM_TLS=1.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;

  /// Parses every field from `env`; unset variables keep the defaults above.
  /// Throws ConfigError naming the variable when a value is unusable.
  static Config FromEnvironment(const Environment& env);
};

}  // namespace tandem::base
