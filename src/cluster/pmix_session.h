// What the PMIx start-up contract (pmix_contract.h) needs from a PMIx
// server: the job's facts about this process, and one put/fence/get
// exchange. PmixClient (pmix_client.h) is the real one, over Debian's
// libpmix; the unit tests use an in-memory job of threads instead.
#pragma once

#include <chrono>
#include <string>

namespace tandem::cluster {

/// What the PMIx server knows about this process and its job.
struct PmixJobFacts {
  std::string nspace;    ///< PMIx namespace of the job (PMIX_NAMESPACE)
  int rank = 0;          ///< this process's rank in the namespace
  int job_size = 1;      ///< PMIX_JOB_SIZE
  int local_rank = 0;    ///< PMIX_LOCAL_RANK
  int local_size = 1;    ///< PMIX_LOCAL_SIZE
  int node_id = 0;       ///< PMIX_NODEID: this node's index in the job
  int num_nodes = 1;     ///< PMIX_NUM_NODES
  std::string hostname;  ///< PMIX_HOSTNAME of this process; empty when not given
};

/// One connection to the PMIx server of this process's job.
/// Thread: one thread at a time.
class PmixSession {
 public:
  virtual ~PmixSession() = default;

  /// The job's facts about this process. Throws ConfigError when the server
  /// lacks one that is required (the job size) or gives a value out of range.
  virtual PmixJobFacts Facts() = 0;

  /// Puts `key` = `value` (a string, visible to every rank of the job after
  /// the next fence) and commits it. Throws ConfigError naming the key.
  virtual void Publish(const std::string& key, const std::string& value) = 0;

  /// Waits until every rank of the namespace has reached a fence and the
  /// committed values are exchanged. Throws Timeout after `timeout`, saying
  /// what was waited for.
  virtual void Fence(std::chrono::milliseconds timeout) = 0;

  /// The string `rank` published under `key` (after a fence). Throws
  /// ConfigError naming the rank and key when there is none or it is not a
  /// string, Timeout after `timeout`.
  virtual std::string Lookup(int rank, const std::string& key,
                             std::chrono::milliseconds timeout) = 0;
};

}  // namespace tandem::cluster
