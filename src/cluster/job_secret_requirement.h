// A process that joins a job from its environment refuses to start without
// the job's secret (TANDEM_SECRET), unless TANDEM_INSECURE=1 says the
// network is trusted (docs/security.md, "The job's secret").
//
// Without this check, processes started with no secret authenticate each
// other with the empty key, which anyone who can reach a port also knows.
// `tandem launch` and `tandem k8s render` always provide a secret; a job
// started by hand, by torchrun, mpirun or srun must pass one itself, and
// the error says how for the start-up contract that was detected.
#pragma once

#include <string_view>

#include "base/config.h"
#include "base/logger.h"

namespace tandem::cluster {

/// Checks that `config` carries a non-empty secret. With TANDEM_INSECURE=1
/// and no secret, logs one warning to `log` and returns. `contract` is the
/// resolved start-up contract (TANDEM_STARTUP_CONTRACT, e.g. "torchrun: rank
/// 1 of 2 ..."); its first word picks the hint of how to pass a secret.
/// Throws ConfigError (exit code 78) naming TANDEM_SECRET and
/// TANDEM_INSECURE when the secret is empty and insecure mode is off.
/// Any thread.
void RequireJobSecret(const base::Config& config, std::string_view contract,
                      const base::Logger& log);

}  // namespace tandem::cluster
