// PeerMesh: construction, and the transport's entry point, which hands each
// message type to the part of the mesh that handles it (peer_mesh.h lists
// the files). A malformed message fails the mesh and closes the connection
// it came on.
#include "collective/peer_mesh.h"

#include <fmt/format.h>

#include <random>

#include "tandem/error.h"

namespace tandem::collective {

namespace {

uint64_t RandomCookie() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd() ^ 0x74616e64656d0000ULL;  // never 0
}

}  // namespace

PeerMesh::PeerMesh(Options options, net::Transport& transport, base::Logger& log,
                   net::TrafficMeter* traffic)
    : options_(options),
      transport_(transport),
      log_(log),
      traffic_(traffic),
      cookie_(RandomCookie()) {
  if (options_.connections_per_peer < 1) {
    throw InvalidArgument(fmt::format("connections per peer must be at least 1, got {}",
                                      options_.connections_per_peer));
  }
}

PeerMesh::~PeerMesh() = default;

std::string PeerMesh::Describe(int rank) const {
  if (rank < 0 || rank >= size()) return fmt::format("worker rank {}", rank);
  const NodeInfo& n = Info(rank);
  return fmt::format("worker rank {} ({}:{})", rank, n.host, n.port);
}

const std::string& PeerMesh::Host(int rank) const {
  if (rank < 0 || rank >= size()) {
    throw InvalidArgument(fmt::format("worker rank {} is outside 0..{}", rank, size() - 1));
  }
  return Info(rank).host;
}

void PeerMesh::Wake() {
  Bell().Ring();
  cv_.notify_all();
}

void PeerMesh::OnConnected(net::ConnectionId id, const net::PeerInfo& peer) {
  (void)id, (void)peer;  // an inbound connection is a mesh link once its hello arrived
}

void PeerMesh::OnMessage(net::ConnectionId id, net::Message&& m) {
  try {
    if (m.header.type == msg::kHello) {
      OnHello(id, m);
      return;
    }
    if (m.header.type == msg::kHelloAck) {
      OnHelloAck(id, m);
      return;
    }
    if (m.header.type == msg::kCopyStatus) {
      OnCopyStatus(id, m);
      return;
    }
    if (m.header.type == msg::kDataRef) {
      OnDataRef(id, m);
      return;
    }
    if (m.header.type == msg::kDataRefDone) {
      OnDataRefDone(id, m);
      return;
    }
    if (m.header.type == msg::kCallNotice) {
      OnCallNotice(id, m);
      return;
    }
    if (m.header.type != msg::kData) {
      throw ProtocolError(fmt::format("unexpected {}", net::MessageTypeName(m.header.type)));
    }
    OnData(id, std::move(m));
  } catch (const Error& e) {
    log_.Error("collective connection from {}: {}; closing it",
               transport_.Peer(id).address.ToString(), e.what());
    Fail(FailureKind::kProtocol, e.what());
    transport_.Close(id);
  }
}

}  // namespace tandem::collective
