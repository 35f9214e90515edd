// The services every worker node carries (docs/architecture.md, "The
// node"): the parameter server's client and the collectives. Both are set
// up when the node is assembled, before it registers with the scheduler,
// because a peer may reach this node for either before this program opens
// it (another worker forming the collective mesh, say); each starts when
// the program first opens it, on the one node, so a process uses the
// parameter server and the collectives together with the same worker rank.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "cluster/node_services.h"
#include "collective/collective_service.h"
#include "kv/kv_client.h"

namespace tandem::api {

/// Thread-safety: every method may be called from any thread.
class WorkerServices {
 public:
  /// Makes both services on a node that has not registered yet. Throws
  /// ConfigError naming a bad TANDEM_KV_* or TANDEM_COLLECTIVE_* value.
  explicit WorkerServices(const cluster::NodeServices& services);
  ~WorkerServices();
  WorkerServices(const WorkerServices&) = delete;
  WorkerServices& operator=(const WorkerServices&) = delete;

  /// The parameter server's client for the distributed store `type`,
  /// connected to every server (on the first call). A node opens one
  /// distributed store in its life: a second call throws InvalidArgument
  /// naming the first store's type.
  kv::KvClient& OpenStore(const std::string& type);
  /// The collectives, with the mesh to every other worker formed (a
  /// collective step: every worker opens them). A node opens them once in
  /// its life: a second call throws InvalidArgument. Throws Timeout naming
  /// the workers that did not connect.
  collective::CollectiveService& OpenCollectives();
  /// Ends the world communicator (Collectives closed or the node going).
  /// Idempotent.
  void CloseCollectives();

 private:
  std::mutex mu_;
  kv::KvClient store_;
  collective::CollectiveService collectives_;
  std::string store_type_;           // of the open store; empty while none; guarded by mu_
  bool collectives_opened_ = false;  // guarded by mu_
};

}  // namespace tandem::api
