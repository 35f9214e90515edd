// The framework engine: frameworks produce gradients in whatever order their
// autograd runs, so they cannot promise every rank the same call order that
// Communicator requires. They hand named asynchronous requests to a
// FusionEngine instead; its background thread agrees with the other ranks
// which requests are ready on all of them, runs those in one agreed order,
// packs small allreduces into one fusion buffer, and remembers the agreement
// (a response cache) so that a repeated step costs a few bits per tensor.
// Ranks that disagree about a tensor get an error naming it and what each
// rank sent; a tensor that some ranks never submit is reported as a stall.
// docs/collectives.md ("Framework engine") gives the semantics and the
// environment variables (Horovod's names are honoured).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "tandem/collective.h"
#include "tandem/tensor.h"

namespace tandem {

namespace collective {
class FusionEngineImpl;
}

/// Thread-safety: every method may be called from any thread, concurrently.
class FusionEngine {
 public:
  struct Options {
    /// Allreduces are packed into buffers of at most this many bytes; 0
    /// turns fusion off. HOROVOD_FUSION_THRESHOLD / TANDEM_FUSION_THRESHOLD.
    size_t fusion_threshold = size_t{128} << 20;
    /// The time between two negotiation cycles (requests that arrive within
    /// one cycle are fused together). HOROVOD_CYCLE_TIME /
    /// TANDEM_CYCLE_TIME, in milliseconds (fractions allowed).
    std::chrono::microseconds cycle_time{1000};
    /// Entries of the response cache; 0 turns it off. HOROVOD_CACHE_CAPACITY
    /// / TANDEM_CACHE_CAPACITY.
    size_t cache_capacity = 1024;
    /// A tensor submitted by some ranks but not all for this long is logged
    /// on every rank, naming the tensor and the missing ranks. 0 turns the
    /// report off. TANDEM_STALL_WARNING_SECONDS (or Horovod's
    /// HOROVOD_STALL_CHECK_TIME_SECONDS / TANDEM_STALL_CHECK_TIME_SECONDS);
    /// HOROVOD_STALL_CHECK_DISABLE=1 also turns it off. Horovod's 60 s is
    /// too late to tell a user what is wrong: 10 s.
    std::chrono::milliseconds stall_check{10000};
    /// ... and after this long its requests fail with that report. 0 means
    /// never; the default is the communicator's time-out
    /// (TANDEM_COLLECTIVE_TIMEOUT), so that no request waits forever.
    /// HOROVOD_STALL_SHUTDOWN_TIME_SECONDS / TANDEM_STALL_SHUTDOWN_TIME_SECONDS.
    std::chrono::milliseconds stall_shutdown{300000};

    /// Rank 0's fusion threshold, cycle time and cache capacity are in
    /// force on every rank (each cycle carries them), so ranks started with
    /// different values still fuse alike. With `autotune`, rank 0 tunes the
    /// threshold, the cycle time and the algorithm of requests submitted
    /// with kAuto while the job runs, from the bytes per second its engine
    /// completes (docs/collectives.md, "Autotune"). HOROVOD_AUTOTUNE /
    /// TANDEM_AUTOTUNE.
    bool autotune = false;
    /// Samples discarded before the search. HOROVOD_AUTOTUNE_WARMUP_SAMPLES.
    int autotune_warmup_samples = 3;
    /// A sample ends when one tensor name completed this many times.
    /// HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE.
    int autotune_steps_per_sample = 10;
    /// Scored samples at most (the full search takes 28 to 34: every
    /// candidate twice). TANDEM_AUTOTUNE_MAX_SAMPLES (or
    /// HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES).
    int autotune_max_samples = 40;
    /// A candidate replaces the value in use only when its mean throughput
    /// is higher by more than this fraction. TANDEM_AUTOTUNE_MIN_GAIN.
    double autotune_min_gain = 0.03;
    /// A CSV of every sample and the choice, written by rank 0.
    /// HOROVOD_AUTOTUNE_LOG / TANDEM_AUTOTUNE_LOG.
    std::string autotune_log;
    /// The chosen settings as environment variables (one NAME=value per
    /// line), written by rank 0 for later runs. TANDEM_AUTOTUNE_RESULT.
    std::string autotune_result;

    /// Reads the variables above from `env` (a TANDEM_ name wins over the
    /// HOROVOD_ one). Throws ConfigError naming a malformed variable.
    static Options FromEnvironment(const std::map<std::string, std::string>& env);
    /// The same from the process environment.
    static Options FromEnvironment();
  };

  /// What the engine did so far (for tests and monitoring).
  struct Stats {
    uint64_t cycles = 0;           ///< negotiation cycles run
    uint64_t negotiated = 0;       ///< requests agreed from full descriptions
    uint64_t cached = 0;           ///< requests agreed from response-cache bits only
    uint64_t collectives = 0;      ///< collective operations run for requests
    uint64_t fused_tensors = 0;    ///< requests that shared a fusion buffer with another
    uint64_t mismatches = 0;       ///< tensors failed because ranks disagreed
    uint64_t stalls_reported = 0;  ///< stall reports logged
    uint64_t stalls_failed = 0;    ///< tensors failed after the stall shutdown time
    std::string last_report;       ///< the text of the last mismatch or stall report
    /// The settings in force in the last cycle (rank 0's).
    size_t fusion_threshold = 0;
    std::chrono::microseconds cycle_time{0};
    AllReduceAlgorithm algorithm = AllReduceAlgorithm::kAuto;
    /// On rank 0 with autotune: samples scored, and whether it chose.
    uint64_t autotune_samples = 0;
    bool autotune_done = false;
  };

  /// Starts the engine's thread over `communicator`, which the engine owns
  /// and uses alone (make one with Collectives::NewGroup, e.g. over every
  /// worker). Every member of the group must create its engine; the ranks'
  /// engines then negotiate every cycle. Throws InvalidArgument for a null
  /// communicator or options past the cycle message's limits (a threshold
  /// over 2^36 bytes, a cycle time over 60 s, a cache over 2^20 entries),
  /// ConfigError for an autotune log that rank 0 cannot open.
  FusionEngine(std::unique_ptr<Communicator> communicator, Options options);
  /// Announces to the other ranks that this rank stops and returns once
  /// every rank did (so every member must destroy its engine); requests
  /// still pending then fail with Error("the framework engine stopped ...").
  ~FusionEngine();
  FusionEngine(const FusionEngine&) = delete;
  FusionEngine& operator=(const FusionEngine&) = delete;

  int rank() const;
  int size() const;

  /// Queues the allreduce of `in` into `out` (as Communicator::AllReduce:
  /// same dtype and element count, `out` may be `in`) under `name`, which
  /// names the tensor across ranks: every rank submits it with the same
  /// shape, dtype, reduction and scaling. `options.timeout` and
  /// `options.algorithm` apply to the collective that carries it; its name
  /// is replaced by `name`. The handle's Wait throws CallMismatch (an
  /// InvalidArgument) when the ranks disagree (naming the tensor and what each rank sent), Timeout
  /// when the tensor stalled past the shutdown time (naming the ranks that
  /// never submitted it; InvalidArgument when the submitters also disagree), and PeerLost / Timeout
  /// / ProtocolError of the communicator, after which every request fails alike. Throws
  /// InvalidArgument at once for an empty name, a name already pending on
  /// this rank, or arguments Communicator::AllReduce would refuse.
  CollectiveHandle AllReduce(const std::string& name, const TensorView& in, const TensorView& out,
                             const ReduceOptions& options = {});

  /// Queues the broadcast of `data` from group rank `root` under `name`
  /// (never fused). Errors as AllReduce; throws InvalidArgument at once for
  /// a root outside the group.
  CollectiveHandle Broadcast(const std::string& name, const TensorView& data, int root);

  /// A snapshot of the counters.
  Stats stats() const;

 private:
  // FusionEngineImpl::MakeEngine builds engines on another clock (tests).
  friend class collective::FusionEngineImpl;
  explicit FusionEngine(std::unique_ptr<collective::FusionEngineImpl> impl);

  std::unique_ptr<collective::FusionEngineImpl> impl_;
};

}  // namespace tandem
