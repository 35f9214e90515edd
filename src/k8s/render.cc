#include "k8s/render.h"

#include <fmt/format.h>

#include "k8s/pod_template.h"
#include "tandem/error.h"

namespace tandem::k8s {

std::vector<Kind> AllKinds() {
  return {Kind::kMXJob,    Kind::kPyTorchJob, Kind::kMPIJob,     Kind::kTFJob,
          Kind::kTrainJob, Kind::kJobSet,     Kind::kIndexedJob, Kind::kVolcanoJob};
}

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kMXJob:
      return "mxjob";
    case Kind::kPyTorchJob:
      return "pytorchjob";
    case Kind::kMPIJob:
      return "mpijob";
    case Kind::kTFJob:
      return "tfjob";
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
  if (d.processes_per_node > 1 && kind != Kind::kTrainJob && kind != Kind::kPyTorchJob) {
    throw InvalidArgument(fmt::format(
        "processes_per_node={} needs kind trainjob or pytorchjob (whose pods start their "
        "processes with `tandem spawn-local`); kind {} runs one process per pod",
        d.processes_per_node, KindName(kind)));
  }
  if (d.cluster_runtime && kind != Kind::kTrainJob) {
    throw InvalidArgument(fmt::format(
        "cluster_runtime=true needs kind trainjob (a ClusterTrainingRuntime is a Kubeflow "
        "Trainer runtime); kind {} has none",
        KindName(kind)));
  }
  if (d.Elastic()) {
    if (kind != Kind::kPyTorchJob) {
      throw InvalidArgument(fmt::format(
          "min_workers={} (below workers={}) needs kind pytorchjob, the one controller with an "
          "elastic policy (elasticPolicy); kind {} fails or restarts the whole job when a pod "
          "fails",
          d.min_workers, d.workers, KindName(kind)));
    }
    if (d.restart_policy == RestartPolicy::kNever) {
      throw InvalidArgument(fmt::format(
          "min_workers={} needs restart_policy 'ExitCode' or 'OnFailure' (a failed worker pod is "
          "started again and joins the running job); under 'Never' the operator fails the whole "
          "job when one pod fails",
          d.min_workers));
    }
    if (d.processes_per_node > 1) {
      throw InvalidArgument(fmt::format(
          "min_workers={} needs processes_per_node=1 (an elastic job's workers are pods, each "
          "joining the job on its own), got processes_per_node={}",
          d.min_workers, d.processes_per_node));
    }
  }
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
    case Kind::kTFJob:
      objects = RenderTFJob(d);
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

namespace {

bool IsPlainKey(const std::string& key) {
  if (key.empty()) return false;
  const char first = key[0];
  if (!((first >= 'A' && first <= 'Z') || (first >= 'a' && first <= 'z') || first == '_')) {
    return false;
  }
  for (char c : key) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '/' || c == '-';
    if (!ok) return false;
  }
  // YAML 1.1 readers take these as booleans or null.
  std::string lower;
  for (char c : key) lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  for (const char* word : {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}) {
    if (lower == word) return false;
  }
  return true;
}

std::string Key(const std::string& key) {
  return IsPlainKey(key) ? key : nlohmann::json(key).dump();
}

// A scalar or an empty collection, on the current line.
std::string Inline(const nlohmann::json& v) {
  if (v.is_object()) return "{}";
  if (v.is_array()) return "[]";
  return v.dump();  // a JSON string is a YAML double-quoted scalar
}

bool IsBlock(const nlohmann::json& v) { return (v.is_object() || v.is_array()) && !v.empty(); }

void Emit(const nlohmann::json& v, int indent, std::string& out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  if (v.is_object() && !v.empty()) {
    for (const auto& [key, item] : v.items()) {
      out += pad + Key(key) + ":";
      if (IsBlock(item)) {
        out += "\n";
        // A sequence may sit at its key's indentation; a mapping goes deeper.
        Emit(item, item.is_array() ? indent : indent + 2, out);
      } else {
        out += " " + Inline(item) + "\n";
      }
    }
  } else if (v.is_array() && !v.empty()) {
    for (const auto& item : v) {
      if (IsBlock(item)) {
        // The item's block at indent + 2, its first line's indentation
        // replaced by "- ".
        std::string block;
        Emit(item, indent + 2, block);
        out += pad + "- " + block.substr(static_cast<size_t>(indent) + 2);
      } else {
        out += pad + "- " + Inline(item) + "\n";
      }
    }
  } else {
    out += pad + Inline(v) + "\n";
  }
}

}  // namespace

std::string ToYaml(const nlohmann::json& value, int indent) {
  std::string out;
  Emit(value, indent, out);
  return out;
}

std::string ToYamlStream(const std::vector<nlohmann::json>& objects) {
  std::string out;
  for (const auto& object : objects) {
    out += "---\n";
    out += ToYaml(object);
  }
  return out;
}

}  // namespace tandem::k8s
