#include "cluster/node_address.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "tandem/error.h"

namespace tandem::cluster {
namespace {

std::string NumericHost(const sockaddr* sa, socklen_t len) {
  char buf[NI_MAXHOST];
  if (getnameinfo(sa, len, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) != 0) return {};
  std::string host(buf);
  // Drop an IPv6 zone ("fe80::1%eth0"): not routable beyond the link anyway.
  auto pct = host.find('%');
  if (pct != std::string::npos) host.resize(pct);
  return host;
}

}  // namespace

bool IsIpLiteral(const std::string& host) {
  in_addr v4;
  in6_addr v6;
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

std::string InterfaceAddress(const std::string& name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    throw IoError(fmt::format("getifaddrs failed while looking for DMLC_INTERFACE={}: {}", name,
                              std::strerror(errno)));
  }
  std::string v4;
  std::string v6;
  std::vector<std::string> names;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_name == nullptr) continue;
    if (std::find(names.begin(), names.end(), it->ifa_name) == names.end()) {
      names.emplace_back(it->ifa_name);
    }
    if (name != it->ifa_name || it->ifa_addr == nullptr) continue;
    if (it->ifa_addr->sa_family == AF_INET && v4.empty()) {
      v4 = NumericHost(it->ifa_addr, sizeof(sockaddr_in));
    } else if (it->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      auto* a6 = reinterpret_cast<const sockaddr_in6*>(it->ifa_addr);
      if (!IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr))
        v6 = NumericHost(it->ifa_addr, sizeof(sockaddr_in6));
    }
  }
  freeifaddrs(list);
  if (!v4.empty()) return v4;
  if (!v6.empty()) return v6;
  std::string known;
  for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError(fmt::format(
      "DMLC_INTERFACE={}: no such interface with an IPv4 or global IPv6 address (interfaces: {})",
      name, known));
}

std::vector<std::string> ResolveHost(const std::string& host, std::chrono::milliseconds timeout,
                                     const base::Logger& log) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto backoff = std::chrono::milliseconds(50);
  int attempts = 0;
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
    ++attempts;
    if (rc == 0) {
      std::vector<std::string> out;
      for (addrinfo* it = res; it != nullptr; it = it->ai_next) {
        std::string numeric = NumericHost(it->ai_addr, it->ai_addrlen);
        if (!numeric.empty() && std::find(out.begin(), out.end(), numeric) == out.end()) {
          out.push_back(numeric);
        }
      }
      freeaddrinfo(res);
      if (!out.empty()) return out;
    }
    bool retryable = rc == EAI_AGAIN || rc == EAI_NONAME || rc == EAI_FAIL || rc == 0
#ifdef EAI_NODATA
                     || rc == EAI_NODATA
#endif
        ;
    std::string error = rc == 0 ? "no addresses" : gai_strerror(rc);
    if (!retryable || std::chrono::steady_clock::now() + backoff > deadline) {
      throw Timeout(fmt::format("could not resolve host '{}' after {} attempts over {} ms: {}",
                                host, attempts, timeout.count(), error));
    }
    if (attempts == 1 || attempts % 10 == 0) {
      log.Info("waiting for host name '{}' to resolve ({}); retrying", host, error);
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
  }
}

std::string RouteSourceAddress(const std::string& host, uint16_t port,
                               std::chrono::milliseconds timeout, const base::Logger& log) {
  std::string last_error;
  for (const auto& numeric : ResolveHost(host, timeout, log)) {
    addrinfo hints{};
    hints.ai_flags = AI_NUMERICHOST;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* res = nullptr;
    std::string port_text = std::to_string(port);
    if (getaddrinfo(numeric.c_str(), port_text.c_str(), &hints, &res) != 0) continue;
    int fd = ::socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    std::string local;
    if (fd >= 0) {
      // A UDP connect() sends nothing: it only asks the kernel for a route.
      if (::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
        sockaddr_storage ss{};
        socklen_t len = sizeof(ss);
        if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
          local = NumericHost(reinterpret_cast<sockaddr*>(&ss), len);
        }
      } else {
        last_error = std::strerror(errno);
      }
      ::close(fd);
    }
    freeaddrinfo(res);
    if (!local.empty()) return local;
  }
  throw IoError(fmt::format("no route from this node to the scheduler at {}:{}: {}", host, port,
                            last_error.empty() ? "no usable address" : last_error));
}

std::string SelectNodeHost(const ProcessDescription& d, std::chrono::milliseconds timeout,
                           const base::Logger& log) {
  if (!d.node_host.empty()) {
    log.V1("announcing address {} (DMLC_NODE_HOST)", d.node_host);
    return d.node_host;
  }
  if (!d.interface.empty()) {
    std::string host = InterfaceAddress(d.interface);
    log.V1("announcing address {} (DMLC_INTERFACE={})", host, d.interface);
    return host;
  }
  std::string host = RouteSourceAddress(d.scheduler_host, d.scheduler_port, timeout, log);
  log.V1("announcing address {} (the route to the scheduler {}:{})", host, d.scheduler_host,
         d.scheduler_port);
  return host;
}

}  // namespace tandem::cluster
