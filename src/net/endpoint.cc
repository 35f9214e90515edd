#include "net/endpoint.h"

#include <fmt/format.h>

#include <charconv>

#include "tandem/error.h"

namespace tandem::net {

std::string Endpoint::ToString() const {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

Endpoint Endpoint::Parse(const std::string& text) {
  std::string host;
  std::string port_text;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      throw InvalidArgument(fmt::format("address '{}' is not of the form [ipv6]:port", text));
    }
    host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos || text.find(':') != colon) {
      throw InvalidArgument(fmt::format("address '{}' is not of the form host:port", text));
    }
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  unsigned port = 0;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (host.empty() || ec != std::errc() || ptr != port_text.data() + port_text.size() ||
      port > 65535) {
    throw InvalidArgument(fmt::format("address '{}' has no valid host and port (0-65535)", text));
  }
  return Endpoint{host, static_cast<uint16_t>(port)};
}

}  // namespace tandem::net
