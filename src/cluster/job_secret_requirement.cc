#include "cluster/job_secret_requirement.h"

#include <fmt/format.h>

#include <string>

#include "tandem/error.h"

namespace tandem::cluster {
namespace {

// How to give every process the secret under the launcher that started
// this one; `name` is the contract's first word.
std::string HintFor(std::string_view name) {
  if (name == "torchrun" || name == "spawn-local") {
    return " Under torchrun: torchrun hands its own environment to every worker, so export "
           "TANDEM_SECRET=$(openssl rand -hex 32) once, copy that value to every node, and start "
           "torchrun there with it (tandem does not derive a secret from torchrun's rendezvous "
           "store: whoever can reach that store could read it).";
  }
  if (name == "pytorchjob" || name == "trainjob" || name == "indexed-job" || name == "volcano") {
    return " On Kubernetes: render the job with `tandem k8s render`, which adds TANDEM_SECRET "
           "from a Secret to every pod, or add it to the pod template from a Secret yourself.";
  }
  if (name == "ompi" || name == "pmix" || name == "pmi") {
    return " Under mpirun: export TANDEM_SECRET and pass it with `mpirun -x TANDEM_SECRET` (or "
           "use `tandem launch --launcher mpi`).";
  }
  if (name == "slurm") {
    return " Under srun: export TANDEM_SECRET before srun (srun passes the environment on), or "
           "use `tandem launch --launcher slurm`.";
  }
  return "";
}

}  // namespace

void RequireJobSecret(const base::Config& config, std::string_view contract,
                      const base::Logger& log) {
  if (!config.secret.empty()) return;
  if (config.insecure) {
    log.Warn(
        "TANDEM_INSECURE=1 and no TANDEM_SECRET: connections are authenticated with an empty "
        "key, so anyone who can reach this process's ports can join job '{}'",
        config.job_id);
    return;
  }
  const std::string_view name = contract.substr(0, contract.find_first_of(": "));
  throw ConfigError(fmt::format(
      "TANDEM_SECRET is not set (start-up contract {}): every process of a job needs the same "
      "secret (tandem launch and tandem k8s render set one); set TANDEM_SECRET=<hex> in every "
      "process's environment, or TANDEM_INSECURE=1 to run without authentication on a trusted "
      "network.{}",
      name, HintFor(name)));
}

}  // namespace tandem::cluster
