// Why a peer mesh is unusable, and which tandem error it throws
// (PeerMesh's failure handling: peer_mesh_failure.cc).
#pragma once

#include <chrono>
#include <exception>
#include <string>
#include <vector>

namespace tandem::collective {

/// Why the mesh is unusable.
/// Which tandem error a failed mesh throws. The last four come from a job
/// stopped by another process (a server that could not load its optimizer
/// states, say): each caller then fails with that process's kind, as the
/// store's calls do (docs/protocol-cluster.md, "Stopping the job").
enum class FailureKind {
  kPeerLost,
  kTimeout,
  kProtocol,
  kMismatch,
  kIo,
  kInvalidArgument,
  kConfig,
  kOther
};

/// The kind of `error` (a tandem error; anything else is kOther); a null
/// pointer is kPeerLost, the job's failure without a cause.
FailureKind FailureKindOf(const std::exception_ptr& error);

struct MeshFailure {
  FailureKind kind = FailureKind::kPeerLost;
  std::string text;
  /// Later losses (other peers' connections, other news), in the order
  /// learnt: when one death makes other workers exit, the first news to
  /// arrive may be of a follower, so an error lists them all.
  std::vector<std::string> later;
  std::chrono::steady_clock::time_point when;
  /// Throws the exception of `kind` with `prefix` + text (+ the later ones).
  [[noreturn]] void Throw(const std::string& prefix) const;
};

}  // namespace tandem::collective
