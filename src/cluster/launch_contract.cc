#include "cluster/launch_contract.h"

#include <fmt/format.h>

#include <charconv>

#include "tandem/error.h"

namespace tandem::cluster {

std::string LaunchContract::ToString() const {
  std::string coordinator = coordinator_host.empty()
                                ? "unknown"
                                : fmt::format("{}:{}", coordinator_host, coordinator_port);
  return fmt::format("{}: rank {} of {} (local {} of {}, node {} of {}), coordinator {}", name,
                     rank, world_size, local_rank, local_size, node_rank, node_count, coordinator);
}

std::pair<std::string, uint16_t> ParseCoordinator(const std::string& variable,
                                                  const std::string& value) {
  auto bad = [&](const char* why) {
    return ConfigError(fmt::format("{}='{}' is not host:port: {}", variable, value, why));
  };
  if (value.empty()) throw bad("empty");
  std::string host;
  std::string port_text;
  if (value.front() == '[') {
    auto close = value.find(']');
    if (close == std::string::npos) throw bad("unclosed '['");
    host = value.substr(1, close - 1);
    if (close + 1 < value.size()) {
      if (value[close + 1] != ':') throw bad("expected ':' after ']'");
      port_text = value.substr(close + 2);
    }
  } else {
    auto colon = value.rfind(':');
    if (colon != std::string::npos && value.find(':') != colon) {
      host = value;  // a bare IPv6 literal
    } else if (colon != std::string::npos) {
      host = value.substr(0, colon);
      port_text = value.substr(colon + 1);
    } else {
      host = value;
    }
  }
  if (host.empty()) throw bad("no host");
  uint16_t port = 0;
  if (!port_text.empty()) {
    unsigned parsed = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), parsed);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || parsed == 0 ||
        parsed > 65535) {
      throw bad("the port is not a number in 1..65535");
    }
    port = static_cast<uint16_t>(parsed);
  }
  return {host, port};
}

void ValidateLaunchContract(const LaunchContract& c) {
  auto check = [&](const char* what, int index, int size) {
    if (size < 1 || index < 0 || index >= size) {
      throw ConfigError(fmt::format("{} contract: {} {} of {} is impossible (need 0 <= {} < {})",
                                    c.name, what, index, size, what, size));
    }
  };
  check("rank", c.rank, c.world_size);
  check("local rank", c.local_rank, c.local_size);
  check("node rank", c.node_rank, c.node_count);
  if (c.local_size > c.world_size || c.node_count > c.world_size) {
    throw ConfigError(
        fmt::format("{} contract: {} processes on the node or {} nodes exceed the "
                    "world size {}",
                    c.name, c.local_size, c.node_count, c.world_size));
  }
}

}  // namespace tandem::cluster
