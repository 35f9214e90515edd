// Endpoint: parsing and formatting of host:port and [v6]:port.
#include "net/endpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tandem/error.h"

namespace tandem::net {
namespace {

struct ValidAddress {
  std::string name;
  std::string text;
  std::string host;
  uint16_t port;
};

class EndpointParseTest : public testing::TestWithParam<ValidAddress> {};

TEST_P(EndpointParseTest, ParsesHostAndPort) {
  Endpoint e = Endpoint::Parse(GetParam().text);
  EXPECT_EQ(e.host, GetParam().host);
  EXPECT_EQ(e.port, GetParam().port);
}

TEST_P(EndpointParseTest, FormatsBackToTheSameText) {
  EXPECT_EQ(Endpoint::Parse(GetParam().text).ToString(), GetParam().text);
}

TEST_P(EndpointParseTest, RoundTripsThroughToString) {
  Endpoint e{GetParam().host, GetParam().port};
  EXPECT_EQ(Endpoint::Parse(e.ToString()), e);
}

INSTANTIATE_TEST_SUITE_P(
    Addresses, EndpointParseTest,
    testing::Values(ValidAddress{"ipv4", "127.0.0.1:9000", "127.0.0.1", 9000},
                    ValidAddress{"ipv4_port_zero", "0.0.0.0:0", "0.0.0.0", 0},
                    ValidAddress{"name_max_port", "scheduler.default.svc:65535",
                                 "scheduler.default.svc", 65535},
                    ValidAddress{"short_name", "h:1", "h", 1},
                    ValidAddress{"ipv6_loopback", "[::1]:9000", "::1", 9000},
                    ValidAddress{"ipv6_any", "[::]:80", "::", 80},
                    ValidAddress{"ipv6_full", "[2001:db8:0:0:0:0:2:1]:1234", "2001:db8:0:0:0:0:2:1",
                                 1234},
                    ValidAddress{"ipv6_zone", "[fe80::1%eth0]:7", "fe80::1%eth0", 7},
                    ValidAddress{"ipv4_mapped", "[::ffff:10.0.0.1]:443", "::ffff:10.0.0.1", 443}),
    [](const auto& tp) { return tp.param.name; });

struct InvalidAddress {
  std::string name;
  std::string text;
  std::string expected;  // substring of the error
};

class EndpointRejectTest : public testing::TestWithParam<InvalidAddress> {};

TEST_P(EndpointRejectTest, ThrowsInvalidArgumentQuotingTheText) {
  try {
    Endpoint::Parse(GetParam().text);
    FAIL() << "expected InvalidArgument for '" << GetParam().text << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("'" + GetParam().text + "'"));
    EXPECT_THAT(e.what(), testing::HasSubstr(GetParam().expected));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Addresses, EndpointRejectTest,
    testing::Values(InvalidAddress{"empty", "", "host:port"},
                    InvalidAddress{"no_port", "localhost", "host:port"},
                    InvalidAddress{"empty_port", "localhost:", "valid host and port"},
                    InvalidAddress{"empty_host", ":80", "valid host and port"},
                    InvalidAddress{"port_too_large", "h:65536", "0-65535"},
                    InvalidAddress{"port_huge", "h:99999999999999999999", "0-65535"},
                    InvalidAddress{"negative_port", "h:-1", "valid host and port"},
                    InvalidAddress{"plus_port", "h:+80", "valid host and port"},
                    InvalidAddress{"space_in_port", "h: 80", "valid host and port"},
                    InvalidAddress{"trailing_junk", "h:80x", "valid host and port"},
                    InvalidAddress{"unbracketed_ipv6", "::1:80", "host:port"},
                    InvalidAddress{"ipv6_no_port", "[::1]", "[ipv6]:port"},
                    InvalidAddress{"ipv6_no_colon", "[::1]80", "[ipv6]:port"},
                    InvalidAddress{"ipv6_unclosed", "[::1:80", "[ipv6]:port"},
                    InvalidAddress{"ipv6_empty_port", "[::1]:", "valid host and port"},
                    InvalidAddress{"ipv6_empty_host", "[]:80", "valid host and port"}),
    [](const auto& tp) { return tp.param.name; });

}  // namespace
}  // namespace tandem::net
