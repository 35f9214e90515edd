// The state behind tandem::FusionEngine (include/tandem/fusion_engine.h):
// the requests this rank holds, the engine's thread that negotiates them
// with the other ranks each cycle, the response cache and the fusion buffer.
//
// A cycle, on every rank's engine thread:
//  1. exchange: every rank's CycleMessage (negotiation_message.h) through an
//     AllGather of one 256-byte slot per rank, plus an AllGatherV of what
//     did not fit (docs/protocol-collective.md, "Framework engine");
//  2. decide: from the same gathered messages every rank computes the same
//     decision, with rank 0's clock for every time, so no rank can run
//     another collective than the others:
//     - a name every rank holds with equal descriptions is ready;
//     - a name every rank holds with different descriptions fails on every
//       rank with InvalidArgument naming the tensor and what each rank sent;
//     - a name some ranks lack waits; past the stall-check time it is
//       reported on every rank (tensor, description, ranks that have it
//       and ranks that lack it); past the stall-shutdown time its requests
//       fail with Timeout carrying that report;
//     the settings in force (fusion threshold, cycle time, cache capacity,
//     the algorithm of kAuto requests) are rank 0's from the same messages;
//  3. execute the ready requests in an order every rank derives alike
//     (kind, dtype, reduction, scaling, algorithm, then name), packing
//     consecutive compatible allreduces into the fusion buffer up to the
//     threshold; each ready name enters the response cache, so later
//     cycles send one bit for it while its description stays the same.
#pragma once

#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/logger.h"
#include "collective/engine_autotuner.h"
#include "collective/negotiation_message.h"
#include "collective/op_context.h"
#include "tandem/fusion_engine.h"

namespace tandem::collective {

struct OpState;

/// Thread-safety: Submit and stats may be called from any thread; the
/// incoming queue, the pending names, the stopping flag, the broken error and
/// the counters are guarded by `mu_`; everything else belongs to the
/// engine's thread.
///
/// Time: the ages of stalled tensors (stall report and shutdown) are read
/// from the engine's clock (base/clock.h), so tests drive them with a
/// ManualClock; the cycle's pace stays in real time (it only batches
/// requests).
class FusionEngineImpl {
 public:
  /// `clock` is borrowed and must outlive the engine; null is the real
  /// monotonic clock.
  FusionEngineImpl(std::unique_ptr<Communicator> comm, FusionEngine::Options options,
                   const base::Clock* clock = nullptr);
  ~FusionEngineImpl();

  /// A tandem::FusionEngine (as its public constructor builds, which
  /// checks `comm` alike) whose stall times come from `clock`, which must
  /// outlive it: for tests that drive time by hand.
  static std::unique_ptr<FusionEngine> MakeEngine(std::unique_ptr<Communicator> comm,
                                                  FusionEngine::Options options,
                                                  const base::Clock& clock);

  /// Queues `request` on `in`/`out` (already checked by the caller).
  /// Throws InvalidArgument for a name already pending on this rank or an
  /// engine being destroyed; after the communicator failed, the handle
  /// carries that failure.
  CollectiveHandle Submit(TensorRequest request, const TensorView& in, const TensorView& out,
                          std::chrono::milliseconds timeout);

  FusionEngine::Stats stats() const;
  Communicator& communicator() { return *comm_; }

 private:
  struct Pending {
    TensorRequest desc;
    TensorView in;
    TensorView out;
    std::chrono::milliseconds timeout{0};
    std::shared_ptr<OpState> state;
    bool sent_in_full = false;  // engine thread: the last cycle sent it without the cache
  };

  // clock_'s time in milliseconds, as a CycleMessage carries it.
  int64_t NowMs() const;
  void Loop();
  // What every rank holds this cycle, by rank: name -> description (in the
  // exchanged messages or cache_), the names sent in full, whether all stop.
  struct Holdings {
    std::vector<std::map<std::string, const TensorRequest*>> held;
    std::vector<std::set<std::string>> in_full;
    bool all_stopped = true;
  };
  // Where one name stands across the ranks this cycle.
  struct Survey {
    std::vector<int> have;                 // ranks that hold it
    std::vector<int> missing;              // ranks that do not yet
    const TensorRequest* first = nullptr;  // the lowest holding rank's description
    bool same = true;                      // every holder's description equals first
    bool full = false;                     // some rank sent it without the cache
  };

  // One cycle (exchange, gather, decide, execute); returns true once every
  // rank announced its stop.
  bool Cycle(bool stopping);
  // Cycle step 1: this rank's message: cached bits where the description is
  // the cached one, full descriptions otherwise.
  CycleMessage OwnMessage(bool stopping);
  // Cycle step 2: every rank's requests, by name; ProtocolError when the
  // engines diverged.
  Holdings Gather(const std::vector<CycleMessage>& all) const;
  // Which ranks hold `name`, and whether their descriptions agree.
  static Survey SurveyName(const std::string& name, const Holdings& holdings);
  // Cycle step 3, one name: fails a disagreement once every rank submitted,
  // moves an agreed request to `ready` (its description to `agreed`), and
  // reports or fails a stalled one by its age at `now0` (rank 0's clock).
  void DecideName(const std::string& name, const Holdings& holdings, int64_t now0,
                  std::vector<std::shared_ptr<Pending>>& ready, std::vector<TensorRequest>& agreed);
  // What each rank sent for `name` when their descriptions differ, and
  // which ranks sent nothing yet.
  static std::string WhatEachSent(const std::string& name, const Survey& survey,
                                  const Holdings& holdings);
  // A name some ranks have not submitted: its age counts from the cycle it
  // was first seen in; past the stall shutdown time it fails on the ranks
  // that submitted it, past the stall check time it is reported once.
  void CheckStall(const std::string& name, const Survey& survey, const std::string& sent,
                  int64_t now0);
  // Fails `name` on this rank (when pending here) and forgets its stall.
  void Fail(const std::string& name, std::exception_ptr error);
  std::vector<CycleMessage> Exchange(const CycleMessage& mine);
  void Execute(std::vector<std::shared_ptr<Pending>>& ready);
  // Completes a request and frees its name for resubmission.
  void Complete(const std::shared_ptr<Pending>& p, std::exception_ptr error);
  // Completes a request that ran, counting it for the tuner.
  void Succeed(const std::shared_ptr<Pending>& p);
  // This rank's own settings, as its message carries them.
  EngineSettings OwnSettings() const;
  void Remember(const TensorRequest& desc);
  template <typename Update>
  void Count(Update update) {
    std::lock_guard lock(mu_);
    update(stats_);
  }

  std::unique_ptr<Communicator> comm_;
  const FusionEngine::Options options_;
  base::Logger& log_;
  const int rank_;
  const int size_;
  base::SteadyClock steady_clock_;  // clock_ when the constructor got none
  const base::Clock& clock_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Pending>> incoming_;  // guarded by mu_
  std::set<std::string> names_;                     // pending on this rank; guarded by mu_
  bool stopping_ = false;                           // guarded by mu_
  std::exception_ptr broken_;                       // guarded by mu_
  FusionEngine::Stats stats_;                       // guarded by mu_

  // Engine thread only.
  std::map<std::string, std::shared_ptr<Pending>> pending_;
  std::vector<TensorRequest> cache_;             // identical on every rank
  std::map<std::string, uint32_t> cache_index_;  // name -> entry of cache_
  std::map<std::string, int64_t> first_seen_;    // rank 0's clock, ms
  std::set<std::string> stall_reported_;
  std::vector<std::byte> fusion_buffer_;
  EngineSettings in_force_;                 // rank 0's, from the last exchange
  size_t cache_capacity_in_force_;          // rank 0's, from the last exchange
  std::unique_ptr<EngineAutotuner> tuner_;  // rank 0 with autotune only
  std::vector<std::string> succeeded_;      // this cycle's, for the tuner
  size_t succeeded_bytes_ = 0;
  std::thread thread_;
};

}  // namespace tandem::collective
