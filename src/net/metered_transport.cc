#include "net/metered_transport.h"

#include <utility>

namespace tandem::net {
namespace {

constexpr std::array<const char*, 4> kServices = {"cluster", "kv", "collective", "other"};

int ServiceOf(uint16_t type) {
  if (type >= msgtype::kClusterFirst && type < msgtype::kKvFirst) return 0;
  if (type >= msgtype::kKvFirst && type < msgtype::kCollectiveFirst) return 1;
  if (type >= msgtype::kCollectiveFirst && type <= msgtype::kLast) return 2;
  return 3;
}

}  // namespace

int TrafficMeter::RoleIndex(const char* role) {
  for (size_t i = 0; i < 3; ++i) {
    if (std::string_view(role) == kRoles[i]) return static_cast<int>(i);
  }
  return 3;
}

TrafficMeter::TrafficMeter(base::StatsRegistry& stats, RoleOf role_of)
    : role_of_(std::move(role_of)) {
  for (int sent = 0; sent < 2; ++sent) {
    const std::string dir = sent ? "sent" : "received";
    const std::string toward = sent ? "to" : "from";
    for (size_t r = 0; r < kRoles.size(); ++r) {
      for (size_t s = 0; s < kServices.size(); ++s) {
        base::StatLabels labels = {{"peer_role", kRoles[r]}, {"service", kServices[s]}};
        Pair& p = series_[static_cast<size_t>(sent)][r][s];
        p.messages = &stats.GetCounter(
            "tandem_" + dir + "_messages_total",
            "Messages " + dir + " " + toward + " peers of a role, by the service owning the type.",
            labels);
        p.bytes = &stats.GetCounter("tandem_" + dir + "_bytes_total",
                                    "Bytes (64-byte header, metadata and payload) " + dir + " " +
                                        toward + " peers of a role, by service.",
                                    labels);
      }
    }
  }
}

TrafficMeter::Pair& TrafficMeter::At(bool sent, int peer, uint16_t type) {
  int role = peer < 0 ? 3 : RoleIndex(role_of_(peer));
  return series_[sent ? 1 : 0][static_cast<size_t>(role)][static_cast<size_t>(ServiceOf(type))];
}

void TrafficMeter::Sent(const Header& h, uint64_t bytes) {
  Pair& p = At(true, h.recipient, h.type);
  p.messages->Add(1);
  p.bytes->Add(bytes);
}

void TrafficMeter::Received(const Header& h, uint64_t bytes) {
  Pair& p = At(false, h.sender, h.type);
  p.messages->Add(1);
  p.bytes->Add(bytes);
}

MeteredTransport::MeteredTransport(TrafficMeter& meter, TransportHandler* upper)
    : meter_(meter), upper_(upper) {}

MeteredTransport::~MeteredTransport() = default;

void MeteredTransport::SetInner(std::unique_ptr<Transport> inner) { inner_ = std::move(inner); }

Endpoint MeteredTransport::Listen(const Endpoint& local) { return inner_->Listen(local); }

ConnectionId MeteredTransport::Connect(const Endpoint& remote, std::chrono::milliseconds timeout) {
  return inner_->Connect(remote, timeout);
}

void MeteredTransport::Send(ConnectionId id, OutgoingMessage msg) {
  uint64_t bytes = kHeaderSize + msg.meta.size();
  for (const auto& s : msg.payload) bytes += s.size();
  meter_.Sent(msg.header, bytes);
  inner_->Send(id, std::move(msg));
}

void MeteredTransport::Close(ConnectionId id) { inner_->Close(id); }

PeerInfo MeteredTransport::Peer(ConnectionId id) const { return inner_->Peer(id); }

void MeteredTransport::Shutdown() {
  if (inner_) inner_->Shutdown();
}

void MeteredTransport::OnConnected(ConnectionId id, const PeerInfo& peer) {
  upper_->OnConnected(id, peer);
}

std::span<std::byte> MeteredTransport::PayloadDestination(ConnectionId id, const Header& h,
                                                          const std::string& meta) {
  return upper_->PayloadDestination(id, h, meta);
}

void MeteredTransport::OnMessage(ConnectionId id, Message&& msg) {
  meter_.Received(msg.header, kHeaderSize + msg.meta.size() + msg.payload.bytes.size());
  upper_->OnMessage(id, std::move(msg));
}

void MeteredTransport::OnDisconnected(ConnectionId id, const std::string& reason) {
  upper_->OnDisconnected(id, reason);
}

}  // namespace tandem::net
