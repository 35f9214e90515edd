// The /metrics endpoint: a scrape over HTTP returns every metric with the
// constant labels, in text that promtool accepts.
#include "metrics/prometheus_endpoint.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "tandem/error.h"

namespace tandem::metrics {
namespace {

std::string HttpGet(uint16_t port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "";
  }
  std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  ::send(fd, req.data(), req.size(), 0);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;)
    out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

void Fill(base::StatsRegistry& r) {
  r.SetConstantLabels({{"role", "worker"}, {"rank", "3"}});
  r.GetCounter("tandem_sent_bytes_total", "Payload and header bytes sent.",
               {{"peer_role", "server"}})
      .Add(4096);
  r.GetGauge("tandem_send_queue_depth", "Messages waiting to be written.").Set(2);
  r.GetHistogram("tandem_push_seconds", "Push latency, call to acknowledgement.").Observe(0.003);
}

TEST(PrometheusEndpoint, AScrapeReturnsEveryMetricWithItsLabels) {
  base::StatsRegistry registry;
  Fill(registry);
  PrometheusEndpoint endpoint(registry, "127.0.0.1", 0);
  ASSERT_NE(endpoint.port(), 0);
  std::string body = HttpGet(endpoint.port(), "/metrics");
  EXPECT_NE(body.find("200 OK"), std::string::npos) << body;
  EXPECT_NE(
      body.find("tandem_sent_bytes_total{peer_role=\"server\",rank=\"3\",role=\"worker\"} 4096"),
      std::string::npos)
      << body;
  EXPECT_NE(body.find("tandem_send_queue_depth{rank=\"3\",role=\"worker\"} 2"), std::string::npos)
      << body;
  EXPECT_NE(body.find("tandem_push_seconds_count{rank=\"3\",role=\"worker\"} 1"), std::string::npos)
      << body;
  // Counters only grow between scrapes.
  registry
      .GetCounter("tandem_sent_bytes_total", "Payload and header bytes sent.",
                  {{"peer_role", "server"}})
      .Add(1);
  EXPECT_NE(HttpGet(endpoint.port(), "/metrics").find("} 4097"), std::string::npos);
}

TEST(PrometheusEndpoint, TheTextPassesPromtool) {
  const char* promtool = "/usr/bin/promtool";
  if (!std::filesystem::exists(promtool)) {
    GTEST_SKIP() << "promtool is not installed (Debian package prometheus; scripts/install-deps.sh "
                    "installs it)";
  }
  base::StatsRegistry registry;
  Fill(registry);
  auto path = std::filesystem::temp_directory_path() /
              ("tandem-metrics-" + std::to_string(::getpid()) + ".txt");
  std::ofstream(path) << RenderPrometheusText(registry);
  std::string cmd = std::string(promtool) + " check metrics < " + path.string() + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p)) out += buf;
  int status = ::pclose(p);
  std::filesystem::remove(path);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out, "") << out;
}

TEST(PrometheusEndpoint, APortInUseIsAnIoError) {
  base::StatsRegistry registry;
  PrometheusEndpoint first(registry, "127.0.0.1", 0);
  EXPECT_THROW(PrometheusEndpoint(registry, "127.0.0.1", first.port()), Error);
}

}  // namespace
}  // namespace tandem::metrics
