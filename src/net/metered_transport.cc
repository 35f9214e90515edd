#include "net/metered_transport.h"

#include <utility>

namespace tandem::net {

TrafficMeter::TrafficMeter(base::StatsRegistry& stats, TrafficLabels labels)
    : labels_(std::move(labels)) {
  const size_t roles = labels_.peer_roles.size();
  const size_t services = labels_.services.size();
  series_.resize(2 * roles * services);
  for (int sent = 0; sent < 2; ++sent) {
    const std::string dir = sent ? "sent" : "received";
    const std::string toward = sent ? "to" : "from";
    for (size_t r = 0; r < roles; ++r) {
      for (size_t s = 0; s < services; ++s) {
        base::StatLabels series_labels = {{"peer_role", labels_.peer_roles[r]},
                                          {"service", labels_.services[s]}};
        Pair& p = series_[(static_cast<size_t>(sent) * roles + r) * services + s];
        p.messages = &stats.GetCounter(
            "tandem_" + dir + "_messages_total",
            "Messages " + dir + " " + toward + " peers of a role, by the service owning the type.",
            series_labels);
        p.bytes = &stats.GetCounter("tandem_" + dir + "_bytes_total",
                                    "Bytes (64-byte header, metadata and payload) " + dir + " " +
                                        toward + " peers of a role, by service.",
                                    series_labels);
      }
    }
  }
}

TrafficMeter::Pair& TrafficMeter::At(bool sent, int peer, uint16_t type) {
  const size_t roles = labels_.peer_roles.size();
  const size_t services = labels_.services.size();
  const size_t role = labels_.peer_role_of(peer);
  const size_t service = labels_.service_of(type);
  return series_[((sent ? 1 : 0) * roles + role) * services + service];
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

bool MeteredTransport::ReadWhileWaiting(std::chrono::steady_clock::time_point deadline,
                                        const std::function<bool()>& done,
                                        std::chrono::milliseconds slice,
                                        std::chrono::microseconds spin) {
  // The counting callbacks above are as safe on the reading thread as on
  // the transport's: they run one at a time either way.
  return inner_ && inner_->ReadWhileWaiting(deadline, done, slice, spin);
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
