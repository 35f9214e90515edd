#include "cluster/contract_detection.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <utility>

#include "cluster/pmix_contract.h"
#include "tandem/error.h"

namespace tandem::cluster {
namespace {

using Reader = std::function<std::optional<LaunchContract>(const base::Environment&)>;

// The contracts inferred from a launcher's own variables, tried after the
// explicit ones (tandem, DMLC) and PMIx, in docs/contracts.md's order.
const std::vector<Reader>& InferredReaders() {
  static const std::vector<Reader> kInferred = {
      ReadOmpiContract,     ReadPmiContract,        ReadSlurmContract,
      ReadTorchrunContract, ReadTrainJobContract,   ReadTfConfigContract,
      ReadSgeContract,      ReadIndexedJobContract, ReadVolcanoContract};
  return kInferred;
}

// Marker variables of every contract, to report those present but ignored.
const std::vector<std::pair<std::string, std::vector<std::string>>>& Markers() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> kMarkers = {
      {"tandem", {"TANDEM_WORLD_SIZE"}},
      {"dmlc", {"DMLC_ROLE"}},
      {"pmix", {"PMIX_RANK", "PMIX_NAMESPACE"}},
      {"ompi", {"OMPI_COMM_WORLD_RANK"}},
      {"pmi", {"PMI_RANK"}},
      {"slurm", {"SLURM_STEP_ID", "SLURM_PROCID"}},
      {"torchrun", {"RANK", "WORLD_SIZE"}},
      {"trainjob", {"PET_NNODES"}},
      {"tfjob", {"TF_CONFIG"}},
      {"sge", {"JOB_ID", "SGE_TASK_ID"}},
      {"indexed-job", {"JOB_COMPLETION_INDEX"}},
      {"volcano", {"VC_TASK_INDEX"}},
  };
  return kMarkers;
}

std::vector<std::string> OthersPresent(const base::Environment& env, const std::string& winner) {
  std::vector<std::string> out;
  for (const auto& [name, vars] : Markers()) {
    if (name == winner) continue;
    if (winner == "pytorchjob" && name == "torchrun") continue;
    // tandem spawn-local read the TrainJob's (or PyTorchJob's) variables
    // and set torchrun's from them.
    if (winner == "spawn-local" && (name == "torchrun" || name == "trainjob")) continue;
    bool all = true;
    for (const auto& v : vars) all = all && env.Get(v).has_value();
    if (all) out.push_back(name);
  }
  return out;
}

}  // namespace

std::string DetectedContract::ToString() const {
  std::string what;
  if (dmlc) {
    what = fmt::format("dmlc: {} (scheduler {}:{}, {} servers, {} workers)", RoleName(dmlc->role),
                       dmlc->scheduler_host, dmlc->scheduler_port, dmlc->num_servers,
                       dmlc->num_workers);
  } else if (peers) {
    what = peers->ToString();
  }
  if (!also_present.empty()) {
    what += fmt::format(" [also present, ignored: {}]", fmt::join(also_present, ", "));
  }
  return what;
}

DetectedContract DetectContract(const base::Environment& env) {
  DetectedContract d;
  auto peers = [&](LaunchContract c) {
    d.name = c.name;
    d.also_present = OthersPresent(env, c.name);
    d.peers = std::move(c);
    return d;
  };
  if (auto c = ReadTandemContract(env)) return peers(std::move(*c));
  // MXJob's MX_CONFIG names the role and the scheduler as DMLC_* does.
  if ((env.Get("DMLC_ROLE") && env.Get("DMLC_PS_ROOT_URI")) || env.Get("MX_CONFIG")) {
    d.name = "dmlc";
    d.dmlc = ParseDmlcContract(env);
    d.also_present = OthersPresent(env, "dmlc");
    return d;
  }
  // PMIx talks to the launcher's server (and may fence with every other
  // rank): only now that no explicit contract won. A server that cannot be
  // reached hands over to the contracts below, and the log says why.
  std::string pmix_unusable;
  try {
    if (auto c = ReadPmixContract(env)) return peers(std::move(*c));
  } catch (const PmixUnavailable& e) {
    pmix_unusable = e.what();
  }
  for (const auto& read : InferredReaders()) {
    if (auto c = read(env)) {
      peers(std::move(*c));
      for (auto& other : d.also_present) {
        if (other == "pmix" && !pmix_unusable.empty()) other = "pmix (" + pmix_unusable + ")";
      }
      return d;
    }
  }
  if (!pmix_unusable.empty()) {
    // PMIX_RANK says this process is one rank of several, and nothing else
    // says where it stands: running it alone would be wrong.
    throw ConfigError(fmt::format(
        "PMIX_RANK={} and PMIX_NAMESPACE={} mark a rank of a PMIx job, but {}; and no other "
        "start-up contract (OMPI_*, PMI_*, SLURM_*, ...) describes this process. Unset the "
        "PMIX_* variables to run it alone",
        env.GetString("PMIX_RANK", ""), env.GetString("PMIX_NAMESPACE", ""), pmix_unusable));
  }
  if (env.Get("DMLC_ROLE")) {
    // DMLC_ROLE without the scheduler's address: let the DMLC reader say
    // what is missing.
    d.name = "dmlc";
    d.dmlc = ParseDmlcContract(env);
    return d;
  }
  LaunchContract single;
  single.name = "single";
  return peers(std::move(single));
}

std::optional<LaunchContract> ReadEnvironmentContract(const base::Environment& env) {
  if (auto c = ReadTandemContract(env)) return c;
  for (const auto& read : InferredReaders()) {
    if (auto c = read(env)) return c;
  }
  return std::nullopt;
}

}  // namespace tandem::cluster

namespace tandem {

std::optional<LocalPlacement> ReadLocalPlacement() {
  auto c = cluster::ReadEnvironmentContract(base::Environment::FromProcess());
  if (!c) return std::nullopt;
  return LocalPlacement{c->name, c->local_rank, c->local_size};
}

}  // namespace tandem
