#include "cluster/contract_detection.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <utility>

namespace tandem::cluster {
namespace {

using Reader = std::function<std::optional<LaunchContract>(const base::Environment&)>;

// Marker variables of every contract, to report those present but ignored.
const std::vector<std::pair<std::string, std::vector<std::string>>>& Markers() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> kMarkers = {
      {"tandem", {"TANDEM_WORLD_SIZE"}},
      {"dmlc", {"DMLC_ROLE"}},
      {"ompi", {"OMPI_COMM_WORLD_RANK"}},
      {"pmi", {"PMI_RANK"}},
      {"slurm", {"SLURM_STEP_ID", "SLURM_PROCID"}},
      {"torchrun", {"RANK", "WORLD_SIZE"}},
      {"trainjob", {"PET_NNODES"}},
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
  if (env.Get("DMLC_ROLE") && env.Get("DMLC_PS_ROOT_URI")) {
    d.name = "dmlc";
    d.dmlc = ParseDmlcContract(env);
    d.also_present = OthersPresent(env, "dmlc");
    return d;
  }
  const Reader kInferred[] = {ReadOmpiContract,     ReadPmiContract,      ReadSlurmContract,
                              ReadTorchrunContract, ReadTrainJobContract, ReadIndexedJobContract,
                              ReadVolcanoContract};
  for (const auto& read : kInferred) {
    if (auto c = read(env)) return peers(std::move(*c));
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

}  // namespace tandem::cluster
