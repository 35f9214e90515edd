#include "net/socket_address.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "tandem/error.h"

namespace tandem::net {

SocketAddress::SocketAddress(const sockaddr* addr, socklen_t len) {
  len_ = std::min<socklen_t>(len, sizeof(storage_));
  std::memcpy(&storage_, addr, len_);
}

Endpoint SocketAddress::ToEndpoint() const {
  char text[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&storage_);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
    return Endpoint{text, ntohs(v4->sin_port)};
  }
  if (family() == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&storage_);
    if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {
      ::inet_ntop(AF_INET, &v6->sin6_addr.s6_addr[12], text, sizeof(text));
    } else {
      ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
    }
    return Endpoint{text, ntohs(v6->sin6_port)};
  }
  return Endpoint{fmt::format("<address family {}>", family()), 0};
}

SocketAddress SocketAddress::LocalOf(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    throw IoError(fmt::format("getsockname(fd {}): {}", fd, ErrnoText(errno)));
  }
  return SocketAddress(reinterpret_cast<sockaddr*>(&ss), len);
}

SocketAddress SocketAddress::PeerOf(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    throw IoError(fmt::format("getpeername(fd {}): {}", fd, ErrnoText(errno)));
  }
  return SocketAddress(reinterpret_cast<sockaddr*>(&ss), len);
}

std::string ErrnoText(int err) {
  char buf[256];
  // GNU strerror_r returns the text, which may or may not live in buf.
  return ::strerror_r(err, buf, sizeof(buf));
}

Resolution Resolve(const Endpoint& ep, bool passive) {
  Resolution out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_protocol = IPPROTO_TCP;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  std::string port = std::to_string(ep.port);
  const char* host = ep.host.empty() ? (passive ? "0.0.0.0" : nullptr) : ep.host.c_str();
  addrinfo* list = nullptr;
  int rc = ::getaddrinfo(host, port.c_str(), &hints, &list);
  if (rc != 0) {
    out.gai_error = rc;
    out.error_text = rc == EAI_SYSTEM ? ErrnoText(errno) : ::gai_strerror(rc);
    out.retryable = rc == EAI_AGAIN || rc == EAI_NONAME || rc == EAI_NODATA;
    return out;
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(list, &::freeaddrinfo);
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET || ai->ai_family == AF_INET6) {
      out.addresses.emplace_back(ai->ai_addr, ai->ai_addrlen);
    }
  }
  if (out.addresses.empty()) {
    out.gai_error = EAI_NODATA;
    out.error_text = "no IPv4 or IPv6 address";
    out.retryable = true;
  }
  return out;
}

base::UniqueFd ListenOn(const Endpoint& local, Endpoint* bound) {
  Resolution r = Resolve(local, /*passive=*/true);
  if (r.addresses.empty()) {
    throw IoError(fmt::format("cannot listen on {}: resolving the host failed: {}",
                              local.ToString(), r.error_text));
  }
  const SocketAddress& addr = r.addresses.front();
  base::UniqueFd fd(
      ::socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP));
  if (!fd) {
    throw IoError(
        fmt::format("cannot listen on {}: socket: {}", local.ToString(), ErrnoText(errno)));
  }
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (addr.family() == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(addr.get());
    if (IN6_IS_ADDR_UNSPECIFIED(&v6->sin6_addr)) {
      int zero = 0;  // "::" serves IPv4 too, whatever the host's default
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
  }
  if (::bind(fd.get(), addr.get(), addr.size()) != 0) {
    throw IoError(fmt::format("cannot listen on {}: bind: {}", local.ToString(), ErrnoText(errno)));
  }
  if (::listen(fd.get(), SOMAXCONN) != 0) {
    throw IoError(
        fmt::format("cannot listen on {}: listen: {}", local.ToString(), ErrnoText(errno)));
  }
  *bound = SocketAddress::LocalOf(fd.get()).ToEndpoint();
  return fd;
}

int ConnectBefore(const SocketAddress& addr, std::chrono::steady_clock::time_point deadline,
                  base::UniqueFd* out) {
  base::UniqueFd fd(
      ::socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP));
  if (!fd) return errno;
  if (::connect(fd.get(), addr.get(), addr.size()) != 0) {
    if (errno != EINPROGRESS) return errno;
    for (;;) {
      auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return ETIMEDOUT;
      pollfd p{fd.get(), POLLOUT, 0};
      int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000000)));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return errno;
      if (n == 0) continue;  // re-check the deadline
      int err = 0;
      socklen_t len = sizeof(err);
      if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
      if (err != 0) return err;
      break;
    }
  }
  // Connecting to a free port of this host can succeed as a TCP simultaneous
  // open with ourselves; nobody is listening, so report it as refused.
  try {
    if (SocketAddress::LocalOf(fd.get()).ToEndpoint() ==
        SocketAddress::PeerOf(fd.get()).ToEndpoint()) {
      return ECONNREFUSED;
    }
  } catch (const IoError&) {
    return ENOTCONN;
  }
  *out = std::move(fd);
  return 0;
}

bool IsRetryableConnectError(int err) {
  switch (err) {
    case ECONNREFUSED:
    case ENETUNREACH:
    case EHOSTUNREACH:
    case ETIMEDOUT:
    case ECONNRESET:
    case ECONNABORTED:
    case EAGAIN:
    case ENOTCONN:
      return true;
    default:
      return false;
  }
}

void SetNoDelay(int fd) {
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    throw IoError(fmt::format("setsockopt(TCP_NODELAY, fd {}): {}", fd, ErrnoText(errno)));
  }
}

void SetBufferSizes(int fd, int bytes) {
  if (bytes <= 0) return;
  for (int opt : {SO_SNDBUF, SO_RCVBUF}) {
    if (::setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof(bytes)) != 0) {
      throw IoError(fmt::format("setsockopt({}, {} bytes, fd {}): {}",
                                opt == SO_SNDBUF ? "SO_SNDBUF" : "SO_RCVBUF", bytes, fd,
                                ErrnoText(errno)));
    }
  }
}

bool SetRtoMin(int fd, std::chrono::microseconds floor) {
  // The value of TCP_RTO_MIN_US in linux/tcp.h from Linux 6.15; Debian's
  // headers are older.
  constexpr int kTcpRtoMinUs = 45;
  const int us = static_cast<int>(floor.count());
  return ::setsockopt(fd, IPPROTO_TCP, kTcpRtoMinUs, &us, sizeof(us)) == 0;
}

}  // namespace tandem::net
