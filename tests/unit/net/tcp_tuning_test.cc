// TcpTuning from the environment, and the retransmission time-out floor on
// a real socket (TANDEM_TCP_RTO_MIN_MS, docs/transport.md, "Loss").
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <map>
#include <string>

#include "base/environment.h"
#include "base/unique_fd.h"
#include "net/socket_address.h"
#include "net/tcp_transport.h"
#include "tandem/error.h"

namespace tandem::net {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

base::Environment Env(std::map<std::string, std::string> vars) {
  return base::Environment(std::move(vars));
}

TEST(TcpTuningEnvironment, RtoFloorDefaultsToTenMillisecondsAndIsRead) {
  EXPECT_EQ(TcpTuning::FromEnvironment(Env({})).rto_min, 10ms);
  EXPECT_EQ(TcpTuning::FromEnvironment(Env({{"TANDEM_TCP_RTO_MIN_MS", "0"}})).rto_min, 0us);
  EXPECT_EQ(TcpTuning::FromEnvironment(Env({{"TANDEM_TCP_RTO_MIN_MS", "25"}})).rto_min, 25ms);
  // The send-queue bound is read alongside.
  EXPECT_EQ(TcpTuning::FromEnvironment(Env({{"TANDEM_MAX_INFLIGHT_BYTES", "1048576"}}))
                .send_queue.max_queued_bytes,
            uint64_t{1} << 20);
}

class TcpTuningBadRto : public ::testing::TestWithParam<std::string> {};

TEST_P(TcpTuningBadRto, IsAConfigErrorNamingTheVariable) {
  try {
    TcpTuning::FromEnvironment(Env({{"TANDEM_TCP_RTO_MIN_MS", GetParam()}}));
    FAIL() << "TANDEM_TCP_RTO_MIN_MS=" << GetParam() << " was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("TANDEM_TCP_RTO_MIN_MS"));
  }
}

INSTANTIATE_TEST_SUITE_P(Values, TcpTuningBadRto, ::testing::Values("-1", "201", "ten", "1.5x"));

// Where the kernel knows TCP_RTO_MIN_US (Linux 6.15 and later), the floor
// reads back at least as large as asked (the kernel rounds up to clock
// ticks); where it does not, SetRtoMin says so instead of throwing.
class RtoFloorOnASocket : public ::testing::TestWithParam<int> {};

TEST_P(RtoFloorOnASocket, ReadsBackAtLeastWhatWasSet) {
  base::UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  ASSERT_GE(fd.get(), 0);
  const auto floor = std::chrono::milliseconds(GetParam());
  if (!SetRtoMin(fd.get(), floor)) {
    GTEST_SKIP() << "this kernel has no TCP_RTO_MIN_US";
  }
  int us = 0;
  socklen_t len = sizeof(us);
  ASSERT_EQ(::getsockopt(fd.get(), IPPROTO_TCP, 45, &us, &len), 0);
  EXPECT_GE(us, static_cast<int>(std::chrono::microseconds(floor).count()));
  EXPECT_LT(us, static_cast<int>(std::chrono::microseconds(floor).count()) + 20000);
}

INSTANTIATE_TEST_SUITE_P(Floors, RtoFloorOnASocket, ::testing::Values(5, 10, 50, 200));

}  // namespace
}  // namespace tandem::net
