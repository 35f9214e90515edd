// A network address as tandem passes it around: a host (name, IPv4 or IPv6
// literal) and a port.
#pragma once

#include <cstdint>
#include <string>

namespace tandem::net {

struct Endpoint {
  std::string host;  ///< DNS name, dotted IPv4, or IPv6 without brackets.
  uint16_t port = 0;

  /// "host:port", with IPv6 literals in brackets ("[::1]:9000").
  std::string ToString() const;
  /// Parses "host:port" or "[v6]:port". Throws InvalidArgument.
  static Endpoint Parse(const std::string& text);

  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

}  // namespace tandem::net
