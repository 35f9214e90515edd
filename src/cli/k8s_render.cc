#include "cli/k8s_render.h"

#include <fmt/format.h>

#include "cli/k8s_pod_template.h"

namespace tandem::cli::k8s {

std::vector<Kind> AllKinds() {
  return {Kind::kMXJob,  Kind::kPyTorchJob, Kind::kMPIJob,    Kind::kTrainJob,
          Kind::kJobSet, Kind::kIndexedJob, Kind::kVolcanoJob};
}

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kMXJob:
      return "mxjob";
    case Kind::kPyTorchJob:
      return "pytorchjob";
    case Kind::kMPIJob:
      return "mpijob";
    case Kind::kTrainJob:
      return "trainjob";
    case Kind::kJobSet:
      return "jobset";
    case Kind::kIndexedJob:
      return "indexed-job";
    case Kind::kVolcanoJob:
      return "volcano-job";
  }
  return "?";
}

std::optional<Kind> ParseKind(const std::string& name) {
  for (Kind kind : AllKinds()) {
    if (name == KindName(kind)) return kind;
  }
  return std::nullopt;
}

std::vector<nlohmann::json> Render(const JobDescription& d, Kind kind,
                                   const std::string& secret_value) {
  std::vector<nlohmann::json> objects;
  switch (kind) {
    case Kind::kMXJob:
      objects = RenderMXJob(d);
      break;
    case Kind::kPyTorchJob:
      objects = RenderPyTorchJob(d);
      break;
    case Kind::kMPIJob:
      objects = RenderMPIJob(d);
      break;
    case Kind::kTrainJob:
      objects = RenderTrainJob(d);
      break;
    case Kind::kJobSet:
      objects = RenderJobSet(d);
      break;
    case Kind::kIndexedJob:
      objects = RenderIndexedJob(d);
      break;
    case Kind::kVolcanoJob:
      objects = RenderVolcanoJob(d);
      break;
  }
  if (d.generate_secret) objects.insert(objects.begin(), SecretObject(d, secret_value));
  return objects;
}

std::string ToYamlStream(const std::vector<nlohmann::json>& objects) {
  std::string out;
  for (const auto& object : objects) {
    out += "---\n";
    out += object.dump(2);
    out += "\n";
  }
  return out;
}

}  // namespace tandem::cli::k8s
