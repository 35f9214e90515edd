// `tandem k8s render`: a job description (job_description.h) becomes
// the manifests of one kind of Kubernetes controller, one file per kind
// (<kind>.cc). docs/deploy.md shows each kind's output and what tandem
// reads inside its pods (docs/contracts.md).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "k8s/job_description.h"

namespace tandem::k8s {

/// The controllers tandem renders for.
enum class Kind {
  kMXJob,
  kPyTorchJob,
  kMPIJob,
  kTFJob,
  kTrainJob,
  kJobSet,
  kIndexedJob,
  kVolcanoJob
};

/// Every kind, in the order of docs/deploy.md.
std::vector<Kind> AllKinds();

/// The command-line name of a kind: "mxjob", "pytorchjob", "mpijob",
/// "tfjob", "trainjob", "jobset", "indexed-job", "volcano-job".
const char* KindName(Kind kind);

/// The kind named `name` (as KindName gives it), or nothing.
std::optional<Kind> ParseKind(const std::string& name);

/// Renders the objects of `kind` for `d`: the Secret first when the
/// description asks to generate it (holding `secret_value`), then what the
/// kind needs (Services, PodGroups, runtimes) before the job itself.
/// Throws InvalidArgument when the kind cannot run the description (e.g. a
/// parameter server as a PyTorchJob), saying which kinds can.
std::vector<nlohmann::json> Render(const JobDescription& d, Kind kind,
                                   const std::string& secret_value);

/// The objects as a multi-document YAML stream, each preceded by a `---`
/// line: block mappings and sequences, strings always double-quoted (JSON's
/// escapes are YAML's), numbers, booleans and null plain; keys plain when
/// they are simple names (letters, digits, '_', '.', '/', '-', not a YAML
/// boolean or null), else quoted.
std::string ToYamlStream(const std::vector<nlohmann::json>& objects);

/// One value as the YAML block above, each line indented by `indent` spaces.
std::string ToYaml(const nlohmann::json& value, int indent = 0);

// One renderer per kind (<kind>.cc); Render() adds the Secret.
std::vector<nlohmann::json> RenderMXJob(const JobDescription& d);
std::vector<nlohmann::json> RenderPyTorchJob(const JobDescription& d);
std::vector<nlohmann::json> RenderMPIJob(const JobDescription& d);
std::vector<nlohmann::json> RenderTFJob(const JobDescription& d);
std::vector<nlohmann::json> RenderTrainJob(const JobDescription& d);
std::vector<nlohmann::json> RenderJobSet(const JobDescription& d);
std::vector<nlohmann::json> RenderIndexedJob(const JobDescription& d);
std::vector<nlohmann::json> RenderVolcanoJob(const JobDescription& d);

}  // namespace tandem::k8s
