// Collectives: allreduce and friends among a job's workers, as equal peers
// (no servers). docs/collectives.md describes the semantics, the algorithms
// and the environment variables; docs/protocol-collective.md the messages.
//
// A process joins with Collectives::Join(), which joins the job (as
// Cluster::Join does), then connects every worker to every other one. The
// world communicator spans all workers (communicator rank = worker rank);
// NewGroup() makes a communicator over a subset (a "process set").
//
// Every operation exists in a blocking form and an asynchronous one that
// returns a CollectiveHandle. The operations of one communicator run one at a
// time, in the order they were submitted, and every member must submit the
// same operations in the same order (as with MPI); tensors must stay alive
// and untouched until the operation completes.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/cluster.h"
#include "tandem/tensor.h"

namespace tandem {

namespace collective {
class CommunicatorImpl;
class CollectiveService;
class FusionEngineImpl;
struct OpState;
}  // namespace collective

/// How AllReduce and ReduceScatter combine the ranks' elements.
enum class Reduction : uint8_t {
  kSum = 0,
  kAvg = 1,  ///< the sum divided by the group size (integers: truncated toward zero)
  kMin = 2,  ///< NaN propagates
  kMax = 3,  ///< NaN propagates
  kProd = 4,
};

/// "sum", "avg", "min", "max", "prod".
std::string ReductionName(Reduction op);

/// AllReduce algorithms (docs/collectives.md). kAuto picks by message and
/// group size from the algorithm table, unless TANDEM_ALLREDUCE_ALGORITHM
/// names one.
enum class AllReduceAlgorithm : uint8_t {
  kAuto = 0,
  kRing = 1,               ///< reduce-scatter + allgather around a ring, pipelined
  kHalvingDoubling = 2,    ///< Rabenseifner: recursive halving, then doubling
  kDirect = 3,             ///< one round: every rank sends its vector to every other
  kRecursiveDoubling = 4,  ///< log2(n) rounds swapping whole vectors with one partner
  /// reduce-scatter on each host, allreduce of each slice across hosts,
  /// allgather on each host (needs as many ranks on every host; else ring)
  kHierarchical = 5,
};

/// "auto", "ring", "halving_doubling", "direct", "recursive_doubling",
/// "hierarchical".
std::string AllReduceAlgorithmName(AllReduceAlgorithm a);

/// What every operation accepts.
struct CollectiveOptions {
  /// Names the tensor in error messages ("layer3.weight.grad").
  std::string name;
  /// The longest the operation may take; zero means the communicator's
  /// default (TANDEM_COLLECTIVE_TIMEOUT, 300 s).
  std::chrono::milliseconds timeout{0};
};

/// AllReduce's and ReduceScatter's options.
struct ReduceOptions : CollectiveOptions {
  Reduction op = Reduction::kSum;
  /// Multiplies every input element before the reduction (floating point
  /// only; 1 leaves the input untouched).
  double prescale = 1.0;
  /// Multiplies the result (floating point only), after the division of kAvg.
  double postscale = 1.0;
  /// AllReduce only.
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kAuto;
  /// AllReduce only: the dtype the data travel and are reduced in, when not
  /// the tensor's: kF16 or kBF16 for a float32 or float64 tensor (half the
  /// bytes of float32 on the wire; Horovod's fp16 compression). The input
  /// (after prescale) is rounded to it, every partial result is rounded
  /// to it, and the result is widened back into the output, where kAvg's
  /// division and postscale apply. Every member must pass the same one: the
  /// call's description carries the wire dtype, so a member that differs
  /// raises CallMismatch naming both. Empty: the tensor's dtype.
  std::optional<DType> wire_dtype;
};

/// The completion of an asynchronous operation.
///
/// Thread-safety: a copyable value; Wait and Done may be called from any
/// thread, concurrently.
class CollectiveHandle {
 public:
  CollectiveHandle() = default;
  /// Blocks until the operation finished. Throws what the operation threw:
  /// InvalidArgument, PeerLost (a member died; names its rank), Timeout
  /// (names the operation, the tensor and the ranks not heard from),
  /// ProtocolError. Requires a handle returned by an operation.
  void Wait() const;
  /// True once the operation finished (successfully or not).
  bool Done() const;
  /// The group rank whose message a receive took (Communicator::RecvAsync,
  /// useful with kAnySource) once Wait returned; -1 for other operations.
  int Source() const;

 private:
  friend class collective::CommunicatorImpl;
  friend class collective::FusionEngineImpl;
  explicit CollectiveHandle(std::shared_ptr<collective::OpState> state)
      : state_(std::move(state)) {}
  std::shared_ptr<collective::OpState> state_;
};

/// A group of ranks that run collectives together.
///
/// Thread-safety: every method may be called from any thread; operations
/// are queued in call order and run one at a time on the communicator's own
/// thread. Destroying a communicator waits for its queued operations.
///
/// Shapes: only element counts and dtypes matter (a shape is a view); every
/// tensor must be contiguous. Input and output may be the same memory
/// ("in place") where an operation says so.
class Communicator {
 public:
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  /// This process's rank in the group (0..size-1) and the group's size.
  int rank() const;
  int size() const;
  /// The worker ranks of the members, in group-rank order.
  const std::vector<int>& members() const;

  /// out = op over every rank's `in`, element-wise, on every rank. `in` and
  /// `out` have the same dtype and element count; `out` may be `in` (in
  /// place). Throws InvalidArgument (mismatched sizes or dtypes, scaling or
  /// avg of an unsupported dtype); then the errors of CollectiveHandle::Wait.
  void AllReduce(const TensorView& in, const TensorView& out, const ReduceOptions& options = {});
  CollectiveHandle AllReduceAsync(const TensorView& in, const TensorView& out,
                                  const ReduceOptions& options = {});

  /// Copies `data` of rank `root` into `data` of every other rank (binomial
  /// tree, pipelined). Throws InvalidArgument for a root outside the group.
  void Broadcast(const TensorView& data, int root, const CollectiveOptions& options = {});
  CollectiveHandle BroadcastAsync(const TensorView& data, int root,
                                  const CollectiveOptions& options = {});

  /// `out` holds size() blocks of `in`'s element count, block r being rank
  /// r's `in`. `in` may alias `out`'s block rank() (in place).
  void AllGather(const TensorView& in, const TensorView& out,
                 const CollectiveOptions& options = {});
  CollectiveHandle AllGatherAsync(const TensorView& in, const TensorView& out,
                                  const CollectiveOptions& options = {});

  /// As AllGather with rank r contributing counts[r] elements; every rank
  /// passes the same `counts` (a caller who does not know them first
  /// all-gathers its own count). `out` holds their sum, blocks in rank order.
  void AllGatherV(const TensorView& in, const TensorView& out, const std::vector<int64_t>& counts,
                  const CollectiveOptions& options = {});
  CollectiveHandle AllGatherVAsync(const TensorView& in, const TensorView& out,
                                   const std::vector<int64_t>& counts,
                                   const CollectiveOptions& options = {});

  /// `in` holds size() blocks of `out`'s element count; `out` receives the
  /// reduction of every rank's block rank(). `out` must not overlap `in`.
  void ReduceScatter(const TensorView& in, const TensorView& out,
                     const ReduceOptions& options = {});
  CollectiveHandle ReduceScatterAsync(const TensorView& in, const TensorView& out,
                                      const ReduceOptions& options = {});

  /// `in` and `out` hold size() equal blocks; block j of `in` goes to rank
  /// j, where it lands in block rank() of `out`. `out` must not overlap `in`.
  void AllToAll(const TensorView& in, const TensorView& out, const CollectiveOptions& options = {});
  CollectiveHandle AllToAllAsync(const TensorView& in, const TensorView& out,
                                 const CollectiveOptions& options = {});

  /// Returns once every member has entered the barrier.
  void Barrier(const CollectiveOptions& options = {});
  CollectiveHandle BarrierAsync(const CollectiveOptions& options = {});

  /// Point-to-point (docs/collectives.md, "Point-to-point"): only the two
  /// ranks take part, and these calls do not wait behind the queued
  /// collective operations. The n-th send from rank a to rank b with tag t
  /// meets b's n-th receive from a with tag t; sizes must match exactly.
  ///
  /// Sends `data` (borrowed until the handle is done: written out, or copied
  /// by a peer on the same host) to group rank `peer`. Throws
  /// InvalidArgument for a peer outside the group or this rank itself.
  void Send(const TensorView& data, int peer, uint64_t tag = 0,
            const CollectiveOptions& options = {});
  CollectiveHandle SendAsync(const TensorView& data, int peer, uint64_t tag = 0,
                             const CollectiveOptions& options = {});

  /// Any member may be the sender of a receive with this peer.
  static constexpr int kAnySource = -1;
  /// Receives the message `tag` from group rank `peer` into `data`, or with
  /// kAnySource the first in rank order among the members whose next such
  /// message arrived (the handle's Source() says whose). A message of
  /// another byte size fails with ProtocolError naming both sizes; the
  /// group stays usable. A timeout fails the group (the two sides' message
  /// counts no longer agree).
  void Recv(const TensorView& data, int peer, uint64_t tag = 0,
            const CollectiveOptions& options = {});
  CollectiveHandle RecvAsync(const TensorView& data, int peer, uint64_t tag = 0,
                             const CollectiveOptions& options = {});

 private:
  friend class collective::CollectiveService;
  friend class collective::FusionEngineImpl;
  explicit Communicator(std::unique_ptr<collective::CommunicatorImpl> impl);
  std::unique_ptr<collective::CommunicatorImpl> impl_;
};

/// A worker's collectives: its membership in the job plus the mesh of
/// connections to the other workers.
///
/// Thread-safety: every method may be called from any thread.
class Collectives {
 public:
  /// Joins the job that the environment describes (Cluster::Join's
  /// contracts, and TANDEM_RENDEZVOUS_IN_PROCESS: see docs/collectives.md)
  /// as a worker, then connects to every other worker. Throws what
  /// Cluster::Join throws; ConfigError when this process is not a worker;
  /// Timeout (names the workers that did not connect).
  static std::unique_ptr<Collectives> Join();
  static std::unique_ptr<Collectives> Join(const std::map<std::string, std::string>& env);
  /// Opens the collectives on a worker's node that joined already (with
  /// Cluster::Join, or a store of KVStore::Create opened on it), then
  /// connects to every other worker: the same worker ranks as the store's.
  /// Every worker opens them; a node opens them once. The Collectives hold
  /// the node as well. Throws InvalidArgument (not a worker, opened
  /// already), Timeout (names the workers that did not connect).
  static std::unique_ptr<Collectives> Open(Cluster& cluster);

  ~Collectives();
  Collectives(const Collectives&) = delete;
  Collectives& operator=(const Collectives&) = delete;

  /// The job membership (rank, barriers, Finalize): this object's own
  /// handle on the node.
  Cluster& cluster();
  /// The communicator over every worker.
  Communicator& world();
  /// A communicator over the workers `world_ranks` (distinct, ascending or
  /// not; group rank i is world_ranks[i]). Only those workers call it, and
  /// they create their groups in the same order. Requires this worker to be
  /// a member. Throws InvalidArgument.
  std::unique_ptr<Communicator> NewGroup(const std::vector<int>& world_ranks);

  /// Elastic jobs (TANDEM_MIN_WORKERS; docs/elastic.md, "Elastic
  /// collectives"): after an operation raised MembershipChanged, every
  /// remaining worker calls Regroup. It waits at a barrier of the workers
  /// that are members (Cluster::Barrier(group::kWorkers)), and when the barrier's
  /// answer is a newer epoch than the world's, world() becomes a
  /// communicator over those workers, over the connections already open:
  /// group rank i is the i-th of them in world-rank order (a worker admitted
  /// at this barrier comes last: docs/elastic.md, "Workers that join"), so
  /// ranks and the size change. Groups made before the change are retired (make them
  /// again). A reference to the earlier world stays valid (its operations
  /// raise MembershipChanged) until Finalize. Without a change it is a
  /// barrier. Returns the barrier's answer. Throws what Barrier throws.
  Members Regroup();

  /// Elastic jobs (docs/elastic.md, "Workers that join"): whether workers
  /// wait to join the running job, as rank 0 of the world knows it,
  /// broadcast to every member (one 8-byte broadcast). Throws
  /// MembershipChanged when they do: the members then Regroup, and the
  /// scheduler admits the waiting workers at that barrier. Every member of
  /// the world calls it at the same point (tandem::elastic::State::Commit
  /// does inside Run). Does nothing in a job that is not elastic.
  void CheckJoins();

  /// Waits for the world's queued operations, ends the world, then
  /// Cluster::Finalize() of its handle (the final barrier when nothing else
  /// holds the node).
  void Finalize();

 private:
  struct Impl;
  explicit Collectives(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
