// Transport benchmark: tandem's TcpTransport against a plain blocking-socket
// loop, two processes on loopback (docs/benchmarks.md, "Transport").
//
// The process forks before any thread exists; the child serves both
// protocols (tandem on its transport thread, the baseline on its main
// thread), the parent drives them. Per round and size, tandem and the
// baseline run back to back, so both see the same machine state; the table
// reports the median over rounds.
//
//   one-way throughput: the sender streams N messages of one size (tandem:
//     Send() from the main thread with at most kWindow messages in flight,
//     released by on_sent, as a worker pushing tensors would; baseline:
//     writev of [16-byte header][payload] per message); the receiver
//     acknowledges at the end; GB/s = payload bytes / time to the ack.
//   round trip: ping-pong of one message size; tandem answers inside the
//     transport callbacks on both sides, into posted buffers, as a server
//     would; the baseline is a blocking send/recv loop.
//
// With --tls the comparison is tandem with TLS (TANDEM_TLS=1) against tandem
// in plaintext instead, for throughput and round trip over 4 KiB..64 MiB: the
// child serves both on two transports, with a throwaway CA and certificate
// made at start-up (net/certificate_authority.h) in a temporary directory.
//
// Usage: transport_bench [--rounds N] [--quick] [--size BYTES] [--sockbuf BYTES] [--tls]
// (--size runs only the listed sizes equal to BYTES, for profiling;
// --sockbuf sets SO_SNDBUF/SO_RCVBUF on tandem's sockets instead of leaving
// them to the kernel's autotuning).
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

#include "base/logger.h"
#include "base/temporary_directory.h"
#include "net/certificate_authority.h"
#include "net/socket_address.h"
#include "net/tcp_transport.h"
#include "tandem/error.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;
using net::ConnectionId;
using net::Endpoint;
using net::Header;
using net::Message;
using net::OutgoingMessage;

// Message types of the benchmark protocol (in the collective range: the
// benchmark stands in for an upper layer).
constexpr uint16_t kData = net::msgtype::kCollectiveFirst;
constexpr uint16_t kEnd = kData + 1;  // request_id = messages sent
constexpr uint16_t kAck = kData + 2;  // request_id = messages received, message_id = bytes
constexpr uint16_t kPing = kData + 3;
constexpr uint16_t kPong = kData + 4;
constexpr uint16_t kVerify = kData + 5;    // payload to checksum
constexpr uint16_t kChecksum = kData + 6;  // request_id = checksum

constexpr size_t kWindow = 64;  // tandem messages in flight per throughput run

// Baseline framing: [u64 kind][u64 length] then `length` payload bytes.
enum BaselineKind : uint64_t { kBaseData = 0, kBaseEnd = 1, kBasePing = 2 };

uint64_t Checksum(std::span<const std::byte> bytes) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (std::byte b : bytes) h = (h ^ static_cast<uint8_t>(b)) * 1099511628211ull;
  return h;
}

void Die(const std::string& what) {
  std::fprintf(stderr, "transport_bench: %s\n", what.c_str());
  std::exit(1);
}

// --- blocking-socket helpers (the baseline) --------------------------------

void WriteAll(int fd, iovec* iov, int count) {
  while (count > 0) {
    ssize_t n = ::writev(fd, iov, count);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) Die(fmt::format("baseline writev: {}", std::strerror(errno)));
    size_t left = static_cast<size_t>(n);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
}

// False on EOF before the first byte.
bool ReadAll(int fd, void* buf, size_t len) {
  auto* p = static_cast<char*>(buf);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, MSG_WAITALL);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return false;
    if (n < 0) Die(fmt::format("baseline recv: {}", std::strerror(errno)));
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

void SendFrame(int fd, uint64_t kind, std::span<const std::byte> payload, uint64_t length) {
  uint64_t hdr[2] = {kind, length};
  iovec iov[2] = {{hdr, sizeof(hdr)}, {const_cast<std::byte*>(payload.data()), payload.size()}};
  WriteAll(fd, iov, payload.empty() ? 1 : 2);
}

void SetNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// --- the child: serves both protocols ---------------------------------------

class EchoServer final : public net::TransportHandler {
 public:
  void SetTransport(net::Transport* t) { transport_ = t; }

  std::span<std::byte> PayloadDestination(ConnectionId, const Header& h,
                                          const std::string&) override {
    if (h.type == kData) return Buffer(data_, h.payload_length);
    if (h.type == kPing) return Buffer(ping_, h.payload_length);
    return {};
  }

  void OnMessage(ConnectionId id, Message&& m) override {
    switch (m.header.type) {
      case kData:
        ++count_;
        bytes_ += m.payload.bytes.size();
        return;
      case kEnd: {
        OutgoingMessage ack;
        ack.header.type = kAck;
        ack.header.request_id = count_;
        ack.header.message_id = bytes_;
        count_ = bytes_ = 0;
        transport_->Send(id, std::move(ack));
        return;
      }
      case kPing: {
        // The pong is sent from the posted buffer: the next ping cannot
        // arrive (and overwrite it) before this pong was written.
        OutgoingMessage pong;
        pong.header.type = kPong;
        pong.header.request_id = m.header.request_id;
        pong.payload.push_back(m.payload.bytes);
        transport_->Send(id, std::move(pong));
        return;
      }
      case kVerify: {
        OutgoingMessage sum;
        sum.header.type = kChecksum;
        sum.header.request_id = Checksum(m.payload.bytes);
        transport_->Send(id, std::move(sum));
        return;
      }
      default:
        return;
    }
  }

 private:
  static std::span<std::byte> Buffer(std::vector<std::byte>& v, uint64_t n) {
    if (v.size() < n) v.resize(n);
    return {v.data(), n};
  }

  net::Transport* transport_ = nullptr;
  std::vector<std::byte> data_;
  std::vector<std::byte> ping_;
  uint64_t count_ = 0;
  uint64_t bytes_ = 0;
};

void ServeBaseline(int listen_fd) {
  std::vector<std::byte> buf;
  for (;;) {
    int fd = ::accept(listen_fd, nullptr, nullptr);
    if (fd < 0) Die(fmt::format("baseline accept: {}", std::strerror(errno)));
    SetNoDelay(fd);
    uint64_t count = 0;
    uint64_t bytes = 0;
    uint64_t hdr[2];
    while (ReadAll(fd, hdr, sizeof(hdr))) {
      if (hdr[0] == kBaseEnd) {
        uint64_t ack[2] = {count, bytes};
        iovec iov{ack, sizeof(ack)};
        WriteAll(fd, &iov, 1);
        count = bytes = 0;
        continue;
      }
      if (buf.size() < hdr[1]) buf.resize(hdr[1]);
      if (!ReadAll(fd, buf.data(), hdr[1])) break;
      if (hdr[0] == kBaseData) {
        ++count;
        bytes += hdr[1];
      } else {
        SendFrame(fd, kBasePing, std::span(buf.data(), hdr[1]), hdr[1]);
      }
    }
    ::close(fd);
  }
}

net::TransportOptions BenchOptions(std::shared_ptr<const net::TlsContext> tls) {
  net::TransportOptions o;
  o.secret = "bench";
  o.job_id = "transport-bench";
  o.tls = std::move(tls);
  return o;
}

// `tls_files`: with --tls, the material of a second, TLS transport the
// child serves too; its port is reported third.
[[noreturn]] void RunChild(int report_fd, int sockbuf, const net::TlsFiles* tls_files) {
  base::Logger log("bench-peer", 0);
  EchoServer echo;
  net::TcpTuning tuning;
  tuning.socket_buffer_bytes = sockbuf;
  net::TcpTransport transport(BenchOptions(nullptr), &echo, log, tuning);
  echo.SetTransport(&transport);
  Endpoint tandem_bound = transport.Listen({"127.0.0.1", 0});
  EchoServer tls_echo;
  std::unique_ptr<net::TcpTransport> tls_transport;
  uint16_t tls_port = 0;
  if (tls_files != nullptr) {
    tls_transport = std::make_unique<net::TcpTransport>(
        BenchOptions(net::TlsContext::Load(*tls_files)), &tls_echo, log, tuning);
    tls_echo.SetTransport(tls_transport.get());
    tls_port = tls_transport->Listen({"127.0.0.1", 0}).port;
  }
  Endpoint base_bound;
  base::UniqueFd base_fd = net::ListenOn({"127.0.0.1", 0}, &base_bound);
  // The listener is non-blocking; the baseline wants a plain blocking one.
  int flags = ::fcntl(base_fd.get(), F_GETFL);
  ::fcntl(base_fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  std::string ports = fmt::format("{} {} {}\n", tandem_bound.port, base_bound.port, tls_port);
  if (::write(report_fd, ports.data(), ports.size()) != static_cast<ssize_t>(ports.size())) {
    Die("cannot report ports to the parent");
  }
  ::close(report_fd);
  ServeBaseline(base_fd.get());
  std::_Exit(0);
}

// --- the parent: drives both --------------------------------------------------

class BenchClient final : public net::TransportHandler {
 public:
  void SetTransport(net::Transport* t) { transport_ = t; }

  std::span<std::byte> PayloadDestination(ConnectionId, const Header& h,
                                          const std::string&) override {
    if (h.type == kPong && h.payload_length <= pong_.size())
      return {pong_.data(), h.payload_length};
    return {};
  }

  void OnMessage(ConnectionId id, Message&& m) override {
    if (m.header.type == kAck || m.header.type == kChecksum) {
      reply_.set_value(std::move(m));
      return;
    }
    if (m.header.type != kPong) return;
    auto now = Clock::now();
    if (pings_done_ >= warmup_)
      samples_.push_back(std::chrono::duration<double, std::micro>(now - sent_at_).count());
    ++pings_done_;
    if (pings_done_ == warmup_ + measured_) {
      finished_.set_value();
      return;
    }
    SendPing(id);  // from inside the callback, as a server answers
  }

  // Arms the next reply (ack or checksum); the future resolves with it.
  std::future<Message> ExpectReply() {
    reply_ = std::promise<Message>();
    return reply_.get_future();
  }

  // Runs warmup + measured ping-pongs of `size` bytes; returns the measured
  // round trips in microseconds.
  std::vector<double> PingPong(ConnectionId id, size_t size, int warmup, int measured) {
    ping_.assign(size, std::byte{0x5a});
    pong_.assign(size, std::byte{0});
    samples_.clear();
    samples_.reserve(measured);
    warmup_ = warmup;
    measured_ = measured;
    pings_done_ = 0;
    finished_ = std::promise<void>();
    auto done = finished_.get_future();
    // The first ping leaves from this thread (posted to the loop so the
    // whole exchange then runs on transport threads).
    sent_at_ = Clock::now();
    transport_->Send(id, MakePing());
    done.wait();
    return samples_;
  }

 private:
  OutgoingMessage MakePing() {
    OutgoingMessage ping;
    ping.header.type = kPing;
    if (!ping_.empty()) ping.payload.push_back(ping_);
    return ping;
  }
  void SendPing(ConnectionId id) {
    sent_at_ = Clock::now();
    transport_->Send(id, MakePing());
  }

  net::Transport* transport_ = nullptr;
  std::promise<Message> reply_;
  std::promise<void> finished_;
  std::vector<std::byte> ping_;
  std::vector<std::byte> pong_;
  std::vector<double> samples_;
  Clock::time_point sent_at_;
  int warmup_ = 0;
  int measured_ = 0;
  int pings_done_ = 0;
};

struct Latency {
  double median = 0;
  double p90 = 0;
};

Latency Summarise(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[v.size() * 9 / 10]};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

uint64_t MessagesFor(size_t size, uint64_t volume) { return std::max<uint64_t>(4, volume / size); }

double TandemThroughput(net::Transport& t, BenchClient& client, ConnectionId id,
                        std::span<const std::byte> payload, uint64_t count) {
  std::counting_semaphore<kWindow> window(kWindow);
  auto reply = client.ExpectReply();
  auto start = Clock::now();
  for (uint64_t i = 0; i < count; ++i) {
    window.acquire();
    OutgoingMessage m;
    m.header.type = kData;
    m.payload.push_back(payload);
    m.on_sent = [&window](std::exception_ptr e) {
      if (e) std::rethrow_exception(e);
      window.release();
    };
    t.Send(id, std::move(m));
  }
  OutgoingMessage end;
  end.header.type = kEnd;
  end.header.request_id = count;
  t.Send(id, std::move(end));
  Message ack = reply.get();
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (ack.header.request_id != count || ack.header.message_id != count * payload.size()) {
    Die(fmt::format("tandem receiver counted {} messages / {} bytes, sent {} / {}",
                    ack.header.request_id, ack.header.message_id, count, count * payload.size()));
  }
  // Let the last on_sent callbacks run before `window` goes away.
  for (size_t i = 0; i < kWindow; ++i) window.acquire();
  return static_cast<double>(count * payload.size()) / seconds / 1e9;
}

double BaselineThroughput(int fd, std::span<const std::byte> payload, uint64_t count) {
  auto start = Clock::now();
  for (uint64_t i = 0; i < count; ++i) SendFrame(fd, kBaseData, payload, payload.size());
  SendFrame(fd, kBaseEnd, {}, count);
  uint64_t ack[2];
  if (!ReadAll(fd, ack, sizeof(ack))) Die("baseline peer closed");
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (ack[0] != count || ack[1] != count * payload.size()) {
    Die(fmt::format("baseline receiver counted {} / {} bytes, sent {} / {}", ack[0], ack[1], count,
                    count * payload.size()));
  }
  return static_cast<double>(count * payload.size()) / seconds / 1e9;
}

std::vector<double> BaselinePingPong(int fd, size_t size, int warmup, int measured) {
  std::vector<std::byte> ping(size, std::byte{0x5a});
  std::vector<std::byte> pong(size);
  std::vector<double> samples;
  samples.reserve(measured);
  for (int i = 0; i < warmup + measured; ++i) {
    auto t0 = Clock::now();
    SendFrame(fd, kBasePing, ping, size);
    uint64_t hdr[2];
    if (!ReadAll(fd, hdr, sizeof(hdr)) || hdr[1] != size) Die("baseline pong malformed");
    if (size > 0 && !ReadAll(fd, pong.data(), size)) Die("baseline peer closed");
    auto t1 = Clock::now();
    if (i >= warmup) samples.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  return samples;
}

std::string SizeName(size_t s) {
  if (s >= (1u << 20)) return fmt::format("{} MiB", s >> 20);
  if (s >= 1024) return fmt::format("{} KiB", s >> 10);
  return fmt::format("{} B", s);
}

std::vector<std::byte> MakePayload() {
  std::vector<std::byte> payload(64u << 20);
  for (size_t i = 0; i < payload.size(); ++i)
    payload[i] = static_cast<std::byte>(i * 2654435761u >> 24);
  return payload;
}

// Dies unless a message of every size in `sizes` reaches the peer intact.
void VerifyIntact(net::Transport& transport, BenchClient& client, ConnectionId id,
                  const std::vector<std::byte>& payload, const std::vector<size_t>& sizes) {
  for (size_t size : sizes) {
    auto reply = client.ExpectReply();
    OutgoingMessage m;
    m.header.type = kVerify;
    m.payload.push_back(std::span(payload.data(), size));
    transport.Send(id, std::move(m));
    uint64_t got = reply.get().header.request_id;
    if (got != Checksum(std::span(payload.data(), size))) {
      Die(fmt::format("checksum mismatch for {} bytes", size));
    }
  }
}

// One tandem client transport connected to the child's port.
struct Side {
  BenchClient client;
  std::unique_ptr<net::TcpTransport> transport;
  ConnectionId id = 0;
};

std::unique_ptr<Side> ConnectSide(uint16_t port, std::shared_ptr<const net::TlsContext> tls,
                                  base::Logger& log, int sockbuf) {
  auto side = std::make_unique<Side>();
  net::TcpTuning tuning;
  tuning.socket_buffer_bytes = sockbuf;
  side->transport =
      std::make_unique<net::TcpTransport>(BenchOptions(std::move(tls)), &side->client, log, tuning);
  side->client.SetTransport(side->transport.get());
  side->id = side->transport->Connect({"127.0.0.1", port}, std::chrono::seconds(10));
  return side;
}

// --tls: tandem with TLS against tandem in plaintext, same sizes for
// throughput and round trip; per round and size both run back to back,
// alternating which goes first.
int RunTlsComparison(uint16_t plain_port, uint16_t tls_port, const net::TlsFiles& files, int rounds,
                     bool quick, size_t only_size, int sockbuf) {
  base::Logger log("bench", 0);
  auto plain = ConnectSide(plain_port, nullptr, log, sockbuf);
  auto tls = ConnectSide(tls_port, net::TlsContext::Load(files), log, sockbuf);
  std::vector<size_t> sizes = {4u << 10, 64u << 10, 1u << 20, 16u << 20, 64u << 20};
  if (only_size != 0) std::erase_if(sizes, [&](size_t s) { return s != only_size; });
  const uint64_t volume = quick ? (128ull << 20) : (1ull << 30);
  std::vector<std::byte> payload = MakePayload();
  VerifyIntact(*tls->transport, tls->client, tls->id, payload, sizes);

  // Round trips per run: many for small messages, fewer (at least 20) for
  // large ones, about `volume` / 4 bytes each way.
  auto pings = [&](size_t size) {
    return static_cast<int>(std::clamp<uint64_t>(volume / 4 / size, 20, quick ? 2000 : 10000));
  };
  std::map<size_t, std::vector<double>> gbps[2], rtt[2];  // [0] plaintext, [1] TLS
  for (int r = 0; r < rounds; ++r) {
    for (size_t size : sizes) {
      std::span<const std::byte> p(payload.data(), size);
      uint64_t n = MessagesFor(size, volume);
      for (int k = 0; k < 2; ++k) {
        int which = (r + k) % 2;
        Side& side = which == 0 ? *plain : *tls;
        gbps[which][size].push_back(TandemThroughput(*side.transport, side.client, side.id, p, n));
      }
      for (int k = 0; k < 2; ++k) {
        int which = (r + k) % 2;
        Side& side = which == 0 ? *plain : *tls;
        int measured = pings(size);
        rtt[which][size].push_back(
            Summarise(side.client.PingPong(side.id, size, std::max(2, measured / 10), measured))
                .median);
      }
    }
    std::fprintf(stderr, "round %d of %d done\n", r + 1, rounds);
  }
  std::printf(
      "TLS 1.3 against plaintext, tandem both (median of %d rounds; throughput: %s per run, "
      "round trip: median of each run)\n\n",
      rounds, SizeName(volume).c_str());
  std::printf(
      "| size | plaintext GB/s | TLS GB/s | TLS/plaintext | plaintext RTT us | TLS RTT us | "
      "TLS/plaintext |\n|---|---|---|---|---|---|---|\n");
  for (size_t size : sizes) {
    double pg = Median(gbps[0][size]);
    double tg = Median(gbps[1][size]);
    double pr = Median(rtt[0][size]);
    double tr = Median(rtt[1][size]);
    std::printf("| %s | %.2f | %.2f | %.2f | %.1f | %.1f | %.2f |\n", SizeName(size).c_str(), pg,
                tg, tg / pg, pr, tr, tr / pr);
  }
  tls->transport->Shutdown();
  plain->transport->Shutdown();
  return 0;
}

int RunParent(uint16_t tandem_port, uint16_t base_port, int rounds, bool quick, size_t only_size,
              int sockbuf) {
  base::Logger log("bench", 0);
  BenchClient client;
  net::TcpTuning tuning;
  tuning.socket_buffer_bytes = sockbuf;
  net::TcpTransport transport(BenchOptions(nullptr), &client, log, tuning);
  client.SetTransport(&transport);
  ConnectionId id = transport.Connect({"127.0.0.1", tandem_port}, std::chrono::seconds(10));

  base::UniqueFd base;
  auto resolved = net::Resolve({"127.0.0.1", base_port}, false);
  if (net::ConnectBefore(resolved.addresses.at(0), Clock::now() + std::chrono::seconds(10),
                         &base) != 0) {
    Die("cannot connect to the baseline server");
  }
  int flags = ::fcntl(base.get(), F_GETFL);
  ::fcntl(base.get(), F_SETFL, flags & ~O_NONBLOCK);
  SetNoDelay(base.get());

  std::vector<size_t> bulk_sizes = {4u << 10, 64u << 10, 1u << 20, 16u << 20, 64u << 20};
  std::vector<size_t> ping_sizes = {8, 64, 1u << 10, 4u << 10};
  if (only_size != 0) {
    std::erase_if(bulk_sizes, [&](size_t s) { return s != only_size; });
    std::erase_if(ping_sizes, [&](size_t s) { return s != only_size; });
  }
  const uint64_t volume = quick ? (128ull << 20) : (1ull << 30);
  const int warmup = quick ? 100 : 500;
  const int measured = quick ? 2000 : 10000;

  std::vector<std::byte> payload = MakePayload();
  // Correctness first: every size arrives intact through tandem.
  VerifyIntact(transport, client, id, payload, bulk_sizes);

  std::map<size_t, std::vector<double>> t_gbps, b_gbps;
  std::map<size_t, std::vector<double>> t_med, t_p90, b_med, b_p90;
  for (int r = 0; r < rounds; ++r) {
    for (size_t size : bulk_sizes) {
      std::span<const std::byte> p(payload.data(), size);
      uint64_t n = MessagesFor(size, volume);
      // Alternate which goes first, so neither always meets a warmer machine.
      if (r % 2 == 0) {
        t_gbps[size].push_back(TandemThroughput(transport, client, id, p, n));
        b_gbps[size].push_back(BaselineThroughput(base.get(), p, n));
      } else {
        b_gbps[size].push_back(BaselineThroughput(base.get(), p, n));
        t_gbps[size].push_back(TandemThroughput(transport, client, id, p, n));
      }
    }
    for (size_t size : ping_sizes) {
      Latency t, b;
      if (r % 2 == 0) {
        t = Summarise(client.PingPong(id, size, warmup, measured));
        b = Summarise(BaselinePingPong(base.get(), size, warmup, measured));
      } else {
        b = Summarise(BaselinePingPong(base.get(), size, warmup, measured));
        t = Summarise(client.PingPong(id, size, warmup, measured));
      }
      t_med[size].push_back(t.median);
      t_p90[size].push_back(t.p90);
      b_med[size].push_back(b.median);
      b_p90[size].push_back(b.p90);
    }
    std::fprintf(stderr, "round %d of %d done\n", r + 1, rounds);
  }

  std::printf("One-way throughput, GB/s of payload (median of %d rounds, %s per run)\n\n", rounds,
              SizeName(volume).c_str());
  std::printf("| size | tandem | baseline | tandem/baseline |\n|---|---|---|---|\n");
  for (size_t size : bulk_sizes) {
    double t = Median(t_gbps[size]);
    double b = Median(b_gbps[size]);
    std::printf("| %s | %.2f | %.2f | %.2f |\n", SizeName(size).c_str(), t, b, t / b);
  }
  std::printf("\nRound trip, microseconds (median of %d rounds of %d pings each)\n\n", rounds,
              measured);
  std::printf(
      "| size | tandem median | tandem p90 | baseline median | baseline p90 | "
      "tandem/baseline (median) |\n|---|---|---|---|---|---|\n");
  for (size_t size : ping_sizes) {
    double tm = Median(t_med[size]);
    double bm = Median(b_med[size]);
    std::printf("| %s | %.1f | %.1f | %.1f | %.1f | %.2f |\n", SizeName(size).c_str(), tm,
                Median(t_p90[size]), bm, Median(b_p90[size]), tm / bm);
  }
  transport.Shutdown();
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  int rounds = 3;
  bool quick = false;
  size_t only_size = 0;
  int sockbuf = 0;
  bool tls = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--tls") {
      tls = true;
    } else if (a == "--sockbuf" && i + 1 < argc) {
      sockbuf = std::atoi(argv[++i]);
    } else if (a == "--size" && i + 1 < argc) {
      only_size = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--rounds N] [--quick] [--size BYTES] [--sockbuf BYTES] [--tls]\n",
                   argv[0]);
      return 2;
    }
  }
  // The TLS material, made before the fork so that both processes use it.
  std::unique_ptr<tandem::base::TemporaryDirectory> scratch;
  tandem::net::TlsFiles tls_files;
  if (tls) {
    try {
      scratch = std::make_unique<tandem::base::TemporaryDirectory>("tandem-bench-tls-");
      tls_files = tandem::net::CertificateAuthority("transport-bench-ca")
                      .WriteFiles(scratch->path(), "transport-bench");
    } catch (const std::exception& e) {
      tandem::bench::Die(e.what());
    }
  }
  // Fork first, while the process has a single thread.
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) tandem::bench::Die("pipe failed");
  pid_t child = ::fork();
  if (child < 0) tandem::bench::Die("fork failed");
  if (child == 0) {
    ::close(pipe_fds[0]);
    tandem::bench::RunChild(pipe_fds[1], sockbuf, tls ? &tls_files : nullptr);
  }
  ::close(pipe_fds[1]);
  char buf[64] = {};
  size_t got = 0;
  while (got < sizeof(buf) - 1) {
    ssize_t n = ::read(pipe_fds[0], buf + got, sizeof(buf) - 1 - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(pipe_fds[0]);
  unsigned tandem_port = 0, base_port = 0, tls_port = 0;
  if (std::sscanf(buf, "%u %u %u", &tandem_port, &base_port, &tls_port) != 3) {
    tandem::bench::Die("the peer process did not report its ports");
  }
  int rc = 1;
  try {
    if (tls) {
      rc = tandem::bench::RunTlsComparison(static_cast<uint16_t>(tandem_port),
                                           static_cast<uint16_t>(tls_port), tls_files, rounds,
                                           quick, only_size, sockbuf);
    } else {
      rc = tandem::bench::RunParent(static_cast<uint16_t>(tandem_port),
                                    static_cast<uint16_t>(base_port), rounds, quick, only_size,
                                    sockbuf);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "transport_bench: %s\n", e.what());
  }
  ::kill(child, SIGTERM);
  ::waitpid(child, nullptr, 0);
  return rc;
}
