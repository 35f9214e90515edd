// The "tandem" backend of torch.distributed (PyTorch 1.13's c10d): a
// c10d::ProcessGroup whose operations run on tandem's collectives
// (include/tandem/collective.h). docs/pytorch-backend.md says what a user
// does and which operations run how; python/tandem/_c10d_backend.py
// registers it with torch.distributed.
//
// A group is one of two kinds:
//  - a *world*: a tandem job formed for this group alone through the c10d
//    store torch hands over (store_rendezvous.h): the default group, or a
//    group whose default group is not tandem's;
//  - a *sub-group* of a tandem default group (dist.new_group): a tandem
//    communicator over the world's existing connections
//    (Collectives::NewGroup), which costs no connection.
//
// Every operation checks its tensors here (dense, CPU, contiguous, a dtype
// tandem has, the shapes the operation needs), queues one or more tandem
// operations and returns a TandemWork that completes when they did
// (work_completion.h). tandem's own call checks then compare the call
// across ranks (docs/collectives.md): a rank that passes a different dtype,
// count, reduce op or root makes the operation fail on every rank.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "tandem/collective.h"
#include "work_completion.h"

namespace tandem::c10d_backend {

/// A tandem world as groups share it: the job's collectives, finalized
/// (the final barrier over every rank) when the last group using it goes.
class SharedWorld {
 public:
  explicit SharedWorld(std::unique_ptr<Collectives> collectives);
  /// Finalizes, unless done; an error is printed, not thrown.
  ~SharedWorld();
  SharedWorld(const SharedWorld&) = delete;
  SharedWorld& operator=(const SharedWorld&) = delete;

  Collectives& collectives() { return *collectives_; }
  /// Collectives::Finalize (the final barrier over every rank), once;
  /// throws what it throws (PeerLost, Timeout).
  void Finalize();

 private:
  std::unique_ptr<Collectives> collectives_;
  std::once_flag finalized_;
};

/// torch.distributed's process group over tandem.
///
/// Thread-safety: the operations may be called from any thread (DDP calls
/// them from its autograd hooks); tandem runs them in call order on the
/// communicator's thread, and the completion thread finishes their works
/// in the same order.
class ProcessGroupTandem : public ::c10d::ProcessGroup {
 public:
  /// A group over `communicator` (owned, or borrowed from `world` when
  /// null), whose members have the global ranks `global_ranks` (for
  /// messages). `timeout` bounds every operation that gives none.
  ProcessGroupTandem(std::shared_ptr<SharedWorld> world,
                     std::unique_ptr<Communicator> own_communicator, std::vector<int> global_ranks,
                     std::chrono::milliseconds timeout);
  /// Waits for the queued operations, then lets go of the world (the last
  /// group to go finalizes it). Releases the GIL while it waits.
  ~ProcessGroupTandem() override;

  /// Forms a new tandem world of `size` ranks through `store` (every rank
  /// calls it with its own `rank`; store_rendezvous.h) and returns its
  /// group; `default_group` when it is torch's default group. Throws
  /// Timeout, ConfigError and what Collectives::Join throws.
  static c10::intrusive_ptr<ProcessGroupTandem> CreateWorld(
      const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
      std::chrono::milliseconds timeout, bool default_group);

  /// A sub-group of `parent`'s world over the world ranks `global_ranks`
  /// (torch's global ranks, which are the world's ranks when `parent` is
  /// the default group). Only members call it, in the same order. Throws
  /// InvalidArgument.
  static c10::intrusive_ptr<ProcessGroupTandem> CreateSubGroup(const ProcessGroupTandem& parent,
                                                               const std::vector<int>& global_ranks,
                                                               std::chrono::milliseconds timeout);

  /// Completes the queued operations and lets go of the communicator; a
  /// world that no other group uses is finalized here (its error is
  /// thrown). Every later operation throws InvalidArgument. Idempotent.
  /// Releases the GIL while it waits. Python's exit calls it for every
  /// group (python/tandem/_c10d_backend.py).
  void Shutdown();

  const std::string getBackendName() const override { return "tandem"; }

  c10::intrusive_ptr<::c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                             const ::c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                             const ::c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const ::c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                          const ::c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                             std::vector<at::Tensor>& inputs,
                                             const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                   const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
      const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const ::c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                           std::vector<std::vector<at::Tensor>>& inputs,
                                           const ::c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                                 std::vector<int64_t>& output_split_sizes,
                                                 std::vector<int64_t>& input_split_sizes,
                                                 const ::c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                            std::vector<at::Tensor>& inputs,
                                            const ::c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> barrier(const ::c10d::BarrierOptions& opts) override;
  /// A barrier whose timeout (`timeout`, else the group's) ends in an error
  /// naming the ranks not heard from; `wait_all_ranks` changes nothing
  /// (tandem's error always names every missing rank).
  void monitoredBarrier(const ::c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  /// Point-to-point operations (docs/pytorch-backend.md): the n-th send
  /// from a to b with a tag meets b's n-th receive from a with that tag;
  /// they complete on their own, not in turn with the collectives.
  /// recvAnysource's work says the sender (sourceRank).
  c10::intrusive_ptr<::c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                        int tag) override;
  c10::intrusive_ptr<::c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                        int tag) override;
  c10::intrusive_ptr<::c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                                 int tag) override;
  /// The number of operations this group has started (every rank counts
  /// the same calls); setSequenceNumberForGroup resets it to 0.
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;

 private:
  // One torch call: its name with this group's sequence number (the same on
  // every rank that makes the same calls), and the bound of its tandem
  // operations.
  struct Call {
    ::c10d::OpType type;
    std::string name;  // "allreduce #12"
    std::chrono::milliseconds timeout;
  };
  Call Begin(::c10d::OpType type, const char* op, std::chrono::milliseconds requested);
  CollectiveOptions Options(const Call& call) const;
  ReduceOptions Reduce(const Call& call, const ::c10d::ReduceOp& op) const;
  // send, recv (peer >= 0) or recvAnysource (kAnySource) of tensors[0].
  c10::intrusive_ptr<::c10d::Work> PointToPoint(std::vector<at::Tensor>& tensors, const char* op,
                                                int peer, int tag);
  // Queues `pending` as the work of `call`, whose result is `outputs`.
  c10::intrusive_ptr<::c10d::Work> Submit(const Call& call, PendingOperation pending,
                                          std::vector<at::Tensor> outputs);
  // An all-to-all with per-rank element counts (alltoall_base and alltoall
  // with unequal splits): every rank's send and receive counts are
  // all-gathered first (blocking) and checked against each other on every
  // rank, then every rank's whole input, from which each rank copies the
  // blocks meant for it into `receive_blocks` (block j from rank j).
  c10::intrusive_ptr<::c10d::Work> AllToAllUneven(const Call& call, const at::Tensor& input,
                                                  const std::vector<int64_t>& send_counts,
                                                  std::vector<at::Tensor> receive_blocks,
                                                  std::vector<at::Tensor> outputs);
  // "the tandem group of ranks [0, 2]" (global ranks).
  std::string GroupName() const;

  std::shared_ptr<SharedWorld> world_;
  std::unique_ptr<Communicator> own_communicator_;  // a sub-group's; null for a world
  Communicator* communicator_;
  std::vector<int> global_ranks_;
  bool shut_down_ = false;  // guarded by submit_mu_
  std::chrono::milliseconds timeout_;
  // One call queues at a time, so that the group's calls reach tandem and
  // the completion queue in the same order.
  std::mutex submit_mu_;
  std::atomic<uint64_t> sequence_{0};
  uint64_t messages_ = 0;  // point-to-point operations started (under submit_mu_)
  // Last: stopped (drained) first, while the communicator is alive.
  std::unique_ptr<CompletionQueue> completions_;
};

}  // namespace tandem::c10d_backend
