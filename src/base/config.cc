#include "base/config.h"

#include <fmt/format.h>

#include <cstdint>
#include <utility>

#include "tandem/error.h"

namespace tandem::base {

Config Config::FromEnvironment(const Environment& env) {
  Config c;
  c.verbose = static_cast<int>(env.GetInt("PS_VERBOSE", c.verbose, 0, 3));
  c.quiet = c.verbose == 0 && !env.GetString("PS_VERBOSE", "").empty();
  c.heartbeat_interval = env.GetSeconds("PS_HEARTBEAT_INTERVAL", c.heartbeat_interval);
  c.heartbeat_timeout = env.GetSeconds("PS_HEARTBEAT_TIMEOUT", c.heartbeat_timeout);
  // MXNet used 0 to mean "no heartbeats"; tandem always watches its peers, so
  // 0 restores the defaults rather than switching detection off.
  if (c.heartbeat_interval.count() == 0) c.heartbeat_interval = std::chrono::seconds(1);
  if (c.heartbeat_timeout.count() == 0) c.heartbeat_timeout = std::chrono::seconds(10);
  if (c.heartbeat_timeout <= c.heartbeat_interval) {
    throw ConfigError(
        fmt::format("PS_HEARTBEAT_TIMEOUT ({} ms) must exceed PS_HEARTBEAT_INTERVAL ({} ms)",
                    c.heartbeat_timeout.count(), c.heartbeat_interval.count()));
  }
  c.secret = env.GetString("TANDEM_SECRET", c.secret);
  c.insecure = env.GetBool("TANDEM_INSECURE", c.insecure);
  c.job_id = env.GetString("TANDEM_JOB_ID", c.job_id);
  c.connect_timeout = env.GetSeconds("TANDEM_CONNECT_TIMEOUT", c.connect_timeout);
  c.handshake_timeout = env.GetSeconds("TANDEM_HANDSHAKE_TIMEOUT", c.handshake_timeout);
  c.max_unauthenticated =
      env.GetInt("TANDEM_MAX_UNAUTHENTICATED", c.max_unauthenticated, 1, int64_t{1} << 24);
  c.start_timeout = env.GetSeconds("TANDEM_START_TIMEOUT", c.start_timeout);
  c.barrier_timeout = env.GetSeconds("TANDEM_BARRIER_TIMEOUT", c.barrier_timeout);
  c.wait_report_interval = env.GetSeconds("TANDEM_WAIT_REPORT_SECONDS", c.wait_report_interval);
  if (c.wait_report_interval.count() <= 0) {
    throw ConfigError(
        fmt::format("TANDEM_WAIT_REPORT_SECONDS must be above 0 (got {} ms): a wait that goes on "
                    "always says so",
                    c.wait_report_interval.count()));
  }
  c.max_meta_bytes = static_cast<uint32_t>(
      env.GetInt("TANDEM_MAX_META_BYTES", c.max_meta_bytes, 1024, int64_t{1} << 30));
  c.max_payload_bytes = static_cast<uint64_t>(env.GetInt(
      "TANDEM_MAX_PAYLOAD_BYTES", static_cast<int64_t>(c.max_payload_bytes), 0, int64_t{1} << 40));
  c.resend = env.GetBool("PS_RESEND", c.resend);
  c.resend_timeout = std::chrono::milliseconds(
      env.GetInt("PS_RESEND_TIMEOUT", c.resend_timeout.count(), 1, int64_t{1} << 31));
  c.resend_retries =
      static_cast<int>(env.GetInt("TANDEM_RESEND_RETRIES", c.resend_retries, 0, 1000000));
  c.resend_window =
      static_cast<uint32_t>(env.GetInt("TANDEM_RESEND_WINDOW", c.resend_window, 1, 1 << 20));
  c.drop_percent = static_cast<int>(env.GetInt("PS_DROP_MSG", c.drop_percent, 0, 100));
  c.drop_seed = static_cast<uint64_t>(
      env.GetInt("TANDEM_DROP_SEED", static_cast<int64_t>(c.drop_seed), 0, INT64_MAX));
  if (c.drop_percent > 0 && !c.resend) {
    throw ConfigError(fmt::format(
        "PS_DROP_MSG={} needs PS_RESEND=1: without resend a dropped message is lost for good",
        c.drop_percent));
  }
  c.tls = env.GetBool("TANDEM_TLS", c.tls);
  c.tls_cert = env.GetString("TANDEM_TLS_CERT", "");
  c.tls_key = env.GetString("TANDEM_TLS_KEY", "");
  c.tls_ca = env.GetString("TANDEM_TLS_CA", "");
  if (c.tls) {
    for (auto [name, value] :
         {std::pair{"TANDEM_TLS_CERT", &c.tls_cert}, std::pair{"TANDEM_TLS_KEY", &c.tls_key},
          std::pair{"TANDEM_TLS_CA", &c.tls_ca}}) {
      if (value->empty()) {
        throw ConfigError(
            fmt::format("TANDEM_TLS=1 needs {} (a PEM file; see docs/environment.md)", name));
      }
    }
  }
  return c;
}

}  // namespace tandem::base
