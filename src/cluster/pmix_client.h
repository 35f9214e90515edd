// The PMIx client of this process: Debian's libpmix (PMIx_Init ...
// PMIx_Finalize) behind the PmixSession interface. Compiled only when CMake
// finds libpmix (pkg-config `pmix`); docs/contracts.md, "PMIx".
#pragma once

#include <pmix.h>

#include "cluster/pmix_session.h"

namespace tandem::cluster {

/// A PMIx client for as long as the object lives: the constructor calls
/// PMIx_Init, the destructor PMIx_Finalize. libpmix counts initialisations,
/// so two clients in one process share one connection, and a client made
/// after another was destroyed connects again.
/// Thread: one thread at a time (libpmix runs its own progress thread).
class PmixClient final : public PmixSession {
 public:
  /// Connects to the PMIx server named by this process's PMIX_* variables.
  /// Throws PmixUnavailable (pmix_contract.h) with libpmix's status when it
  /// cannot (no server, a server gone, a version it does not speak).
  PmixClient();
  ~PmixClient() override;
  PmixClient(const PmixClient&) = delete;
  PmixClient& operator=(const PmixClient&) = delete;

  PmixJobFacts Facts() override;
  void Publish(const std::string& key, const std::string& value) override;
  void Fence(std::chrono::milliseconds timeout) override;
  std::string Lookup(int rank, const std::string& key, std::chrono::milliseconds timeout) override;

 private:
  pmix_proc_t self_{};
};

}  // namespace tandem::cluster
