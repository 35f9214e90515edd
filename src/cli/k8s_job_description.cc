#include "cli/k8s_job_description.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "tandem/error.h"

namespace tandem::cli::k8s {
namespace {

using nlohmann::json;

const char* TypeName(const json& v) { return v.type_name(); }

// Rejects members of `object` (named `where` in messages) not in `known`.
void CheckKnownFields(const json& object, const std::string& where,
                      const std::set<std::string>& known) {
  for (const auto& [key, value] : object.items()) {
    if (known.count(key) == 0) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw InvalidArgument(fmt::format("unknown field '{}{}' in the job description (known: {})",
                                        where.empty() ? "" : where + ".", key, list));
    }
  }
}

std::string GetString(const json& object, const std::string& field, const std::string& fallback,
                      const std::string& where) {
  auto it = object.find(field);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_string()) {
    throw InvalidArgument(
        fmt::format("{} must be a string, got {} ({})", where, it->dump(), TypeName(*it)));
  }
  return it->get<std::string>();
}

int64_t GetInt(const json& object, const std::string& field, int64_t fallback, int64_t min,
               int64_t max, const std::string& where) {
  auto it = object.find(field);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) {
    throw InvalidArgument(
        fmt::format("{} must be a whole number, got {} ({})", where, it->dump(), TypeName(*it)));
  }
  int64_t v = it->get<int64_t>();
  if (v < min) throw InvalidArgument(fmt::format("{} must be >= {}, got {}", where, min, v));
  if (v > max) throw InvalidArgument(fmt::format("{} must be <= {}, got {}", where, max, v));
  return v;
}

bool GetBool(const json& object, const std::string& field, bool fallback,
             const std::string& where) {
  auto it = object.find(field);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    throw InvalidArgument(
        fmt::format("{} must be true or false, got {} ({})", where, it->dump(), TypeName(*it)));
  }
  return it->get<bool>();
}

const json& GetObject(const json& object, const std::string& field, const std::string& where) {
  static const json kEmpty = json::object();
  auto it = object.find(field);
  if (it == object.end() || it->is_null()) return kEmpty;
  if (!it->is_object()) {
    throw InvalidArgument(
        fmt::format("{} must be an object, got {} ({})", where, it->dump(), TypeName(*it)));
  }
  return *it;
}

// A DNS-1123 label (lower-case letters, digits and '-', starting and ending
// with a letter or digit), at most `max` characters; `letter_first` adds
// DNS-1035's rule that it starts with a letter.
void CheckDnsLabel(const std::string& value, size_t max, bool letter_first,
                   const std::string& where) {
  auto bad = [&](const std::string& why) {
    throw InvalidArgument(fmt::format("{} must be {}, got '{}'", where, why, value));
  };
  if (value.empty()) bad("a non-empty DNS label");
  if (value.size() > max) bad(fmt::format("at most {} characters", max));
  for (char c : value) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
      bad("lower-case letters, digits and '-' only");
    }
  }
  if (letter_first && !(value.front() >= 'a' && value.front() <= 'z'))
    bad("starting with a letter");
  if (value.front() == '-' || value.back() == '-')
    bad("starting and ending with a letter or digit");
}

// A Kubernetes quantity: a decimal number with an optional suffix
// (m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei). Empty means "not set".
void CheckQuantity(const std::string& value, const std::string& where) {
  if (value.empty()) return;
  size_t i = 0;
  bool digits = false;
  while (i < value.size() && value[i] >= '0' && value[i] <= '9') ++i, digits = true;
  if (i < value.size() && value[i] == '.') {
    ++i;
    while (i < value.size() && value[i] >= '0' && value[i] <= '9') ++i, digits = true;
  }
  static const std::set<std::string> kSuffixes = {"",  "m",  "k",  "M",  "G",  "T",  "P",
                                                  "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  if (!digits || kSuffixes.count(value.substr(i)) == 0) {
    throw InvalidArgument(fmt::format(
        "{} must be a Kubernetes quantity such as '4', '500m' or '8Gi', got '{}'", where, value));
  }
}

Resources ParseResources(const json& object, const std::string& where, const Resources& fallback) {
  CheckKnownFields(object, where, {"cpu", "memory", "gpus"});
  Resources r;
  r.cpu = GetString(object, "cpu", fallback.cpu, where + ".cpu");
  CheckQuantity(r.cpu, where + ".cpu");
  r.memory = GetString(object, "memory", fallback.memory, where + ".memory");
  CheckQuantity(r.memory, where + ".memory");
  r.gpus = static_cast<int>(GetInt(object, "gpus", fallback.gpus, 0, 1024, where + ".gpus"));
  return r;
}

std::map<std::string, std::string> ParseStringMap(const json& object, const std::string& where) {
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : object.items()) {
    if (!value.is_string()) {
      throw InvalidArgument(fmt::format("{}.{} must be a string, got {} ({})", where, key,
                                        value.dump(), TypeName(value)));
    }
    out[key] = value.get<std::string>();
  }
  return out;
}

void CheckEnvName(const std::string& name, const std::string& where) {
  bool ok = !name.empty() && !(name[0] >= '0' && name[0] <= '9');
  for (char c : name) {
    ok = ok &&
         ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  }
  if (!ok) {
    throw InvalidArgument(fmt::format(
        "{} has the variable name '{}': use letters, digits and '_', not starting with a digit",
        where, name));
  }
}

}  // namespace

int JobDescription::TotalPods() const {
  return strategy == Strategy::kParameterServer ? 1 + servers + workers : workers;
}

const char* StrategyName(Strategy strategy) {
  return strategy == Strategy::kParameterServer ? "parameter-server" : "collectives";
}

JobDescription ParseJobDescription(const json& doc) {
  if (!doc.is_object()) {
    throw InvalidArgument(
        fmt::format("the job description must be a JSON object, got {}", TypeName(doc)));
  }
  CheckKnownFields(doc, "",
                   {"name",
                    "namespace",
                    "image",
                    "command",
                    "strategy",
                    "workers",
                    "processes_per_node",
                    "servers",
                    "command_runs_all_roles",
                    "port",
                    "resources",
                    "server_resources",
                    "gpu_resource",
                    "shm_size",
                    "host_network",
                    "checkpoint",
                    "metrics_port",
                    "restart_policy",
                    "backoff_limit",
                    "secret",
                    "gang_scheduling",
                    "env",
                    "labels"});
  JobDescription d;
  if (!doc.contains("name")) throw InvalidArgument("name is required (the job's name)");
  d.name = GetString(doc, "name", "", "name");
  // Pod names add up to 22 characters ("-scheduler-0-0", a JobSet's indices),
  // and a label value or host name allows 63.
  CheckDnsLabel(d.name, 40, true, "name");
  d.namespace_ = GetString(doc, "namespace", d.namespace_, "namespace");
  CheckDnsLabel(d.namespace_, 63, false, "namespace");

  if (!doc.contains("image")) throw InvalidArgument("image is required (the container image)");
  d.image = GetString(doc, "image", "", "image");
  if (d.image.empty() || d.image.find_first_of(" \t\n") != std::string::npos) {
    throw InvalidArgument(
        fmt::format("image must be a non-empty image reference without spaces, got '{}'", d.image));
  }

  auto command = doc.find("command");
  if (command == doc.end()) {
    throw InvalidArgument(
        "command is required (the workers' argv, e.g. [\"python3\", \"train.py\"])");
  }
  if (!command->is_array() || command->empty()) {
    throw InvalidArgument(
        fmt::format("command must be a non-empty array of strings, got {}", command->dump()));
  }
  for (size_t i = 0; i < command->size(); ++i) {
    const auto& arg = (*command)[i];
    if (!arg.is_string()) {
      throw InvalidArgument(
          fmt::format("command[{}] must be a string, got {} ({})", i, arg.dump(), TypeName(arg)));
    }
    d.command.push_back(arg.get<std::string>());
  }
  if (d.command[0].empty()) throw InvalidArgument("command[0] must name a program, got ''");

  std::string strategy = GetString(doc, "strategy", "collectives", "strategy");
  if (strategy == "parameter-server") {
    d.strategy = Strategy::kParameterServer;
  } else if (strategy == "collectives") {
    d.strategy = Strategy::kCollectives;
  } else {
    throw InvalidArgument(
        fmt::format("strategy must be 'parameter-server' or 'collectives', got '{}'", strategy));
  }
  d.workers = static_cast<int>(GetInt(doc, "workers", 1, 1, 1 << 16, "workers"));
  d.processes_per_node =
      static_cast<int>(GetInt(doc, "processes_per_node", 1, 1, 4096, "processes_per_node"));
  if (d.strategy == Strategy::kParameterServer) {
    d.servers = static_cast<int>(GetInt(doc, "servers", 1, 1, 1 << 16, "servers"));
  } else {
    d.servers = static_cast<int>(GetInt(doc, "servers", 0, 0, 1 << 16, "servers"));
    if (d.servers != 0) {
      throw InvalidArgument(fmt::format(
          "servers must be 0 for strategy 'collectives' (servers belong to a parameter server), "
          "got {}",
          d.servers));
    }
  }
  d.command_runs_all_roles =
      GetBool(doc, "command_runs_all_roles", false, "command_runs_all_roles");
  if (d.command_runs_all_roles && d.strategy != Strategy::kParameterServer) {
    throw InvalidArgument(
        "command_runs_all_roles must be false for strategy 'collectives' (it has no scheduler or "
        "servers), got true");
  }
  int default_port = d.strategy == Strategy::kParameterServer ? 9091 : 29500;
  d.port = static_cast<int>(GetInt(doc, "port", default_port, 1, 65535, "port"));

  d.worker_resources = ParseResources(GetObject(doc, "resources", "resources"), "resources", {});
  Resources server_fallback = d.worker_resources;
  server_fallback.gpus = 0;
  d.server_resources = ParseResources(GetObject(doc, "server_resources", "server_resources"),
                                      "server_resources", server_fallback);
  if (d.strategy == Strategy::kCollectives && doc.contains("server_resources")) {
    throw InvalidArgument(
        "server_resources is for strategy 'parameter-server' (collectives have no servers)");
  }
  d.gpu_resource = GetString(doc, "gpu_resource", d.gpu_resource, "gpu_resource");
  if (d.gpu_resource.empty() || d.gpu_resource.find('/') == std::string::npos) {
    throw InvalidArgument(fmt::format(
        "gpu_resource must be an extended resource name such as 'nvidia.com/gpu', got '{}'",
        d.gpu_resource));
  }
  d.shm_size = GetString(doc, "shm_size", d.shm_size, "shm_size");
  CheckQuantity(d.shm_size, "shm_size");
  d.host_network = GetBool(doc, "host_network", false, "host_network");

  const json& checkpoint = GetObject(doc, "checkpoint", "checkpoint");
  CheckKnownFields(checkpoint, "checkpoint", {"claim", "mount_path"});
  d.checkpoint_claim = GetString(checkpoint, "claim", "", "checkpoint.claim");
  if (doc.contains("checkpoint")) {
    if (d.checkpoint_claim.empty()) {
      throw InvalidArgument(
          "checkpoint.claim is required when checkpoint is given (the name of "
          "a PersistentVolumeClaim)");
    }
    CheckDnsLabel(d.checkpoint_claim, 253, false, "checkpoint.claim");
  }
  d.checkpoint_mount_path =
      GetString(checkpoint, "mount_path", d.checkpoint_mount_path, "checkpoint.mount_path");
  if (d.checkpoint_mount_path.empty() || d.checkpoint_mount_path[0] != '/' ||
      d.checkpoint_mount_path == "/dev/shm") {
    throw InvalidArgument(
        fmt::format("checkpoint.mount_path must be an absolute path other than /dev/shm, got '{}'",
                    d.checkpoint_mount_path));
  }

  d.metrics_port = static_cast<int>(GetInt(doc, "metrics_port", 0, 0, 65535, "metrics_port"));
  if (d.metrics_port != 0 && d.metrics_port == d.port) {
    throw InvalidArgument(fmt::format(
        "metrics_port must differ from port (the rendezvous port), got {} for both", d.port));
  }

  std::string restart = GetString(doc, "restart_policy", "ExitCode", "restart_policy");
  if (restart == "ExitCode") {
    d.restart_policy = RestartPolicy::kExitCode;
  } else if (restart == "OnFailure") {
    d.restart_policy = RestartPolicy::kOnFailure;
  } else if (restart == "Never") {
    d.restart_policy = RestartPolicy::kNever;
  } else {
    throw InvalidArgument(fmt::format(
        "restart_policy must be 'ExitCode', 'OnFailure' or 'Never', got '{}'", restart));
  }
  d.backoff_limit = static_cast<int>(GetInt(doc, "backoff_limit", 3, 0, 1000, "backoff_limit"));

  const json& secret = GetObject(doc, "secret", "secret");
  CheckKnownFields(secret, "secret", {"name", "key", "generate"});
  d.secret_name = GetString(secret, "name", d.name + "-tandem-secret", "secret.name");
  CheckDnsLabel(d.secret_name, 253, false, "secret.name");
  d.secret_key = GetString(secret, "key", d.secret_key, "secret.key");
  if (d.secret_key.empty() ||
      d.secret_key.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                     "0123456789-_.") != std::string::npos) {
    throw InvalidArgument(
        fmt::format("secret.key must be a Secret key (letters, digits, '-', '_', '.'), got '{}'",
                    d.secret_key));
  }
  // Naming a Secret means "use this existing one" unless generate says otherwise.
  d.generate_secret = GetBool(secret, "generate", !secret.contains("name"), "secret.generate");

  const json& gang = GetObject(doc, "gang_scheduling", "gang_scheduling");
  CheckKnownFields(gang, "gang_scheduling", {"scheduler", "queue", "priority_class"});
  std::string scheduler = GetString(gang, "scheduler", "none", "gang_scheduling.scheduler");
  if (scheduler == "volcano") {
    d.gang_volcano = true;
  } else if (scheduler != "none") {
    throw InvalidArgument(
        fmt::format("gang_scheduling.scheduler must be 'volcano' or 'none', got '{}'", scheduler));
  }
  d.queue = GetString(gang, "queue", "", "gang_scheduling.queue");
  if (!d.queue.empty()) CheckDnsLabel(d.queue, 63, false, "gang_scheduling.queue");
  d.priority_class = GetString(gang, "priority_class", "", "gang_scheduling.priority_class");
  if (!d.priority_class.empty()) {
    CheckDnsLabel(d.priority_class, 253, false, "gang_scheduling.priority_class");
  }
  if (!d.gang_volcano && (!d.queue.empty() || !d.priority_class.empty())) {
    throw InvalidArgument(
        "gang_scheduling.queue and gang_scheduling.priority_class need "
        "gang_scheduling.scheduler 'volcano'");
  }

  d.env = ParseStringMap(GetObject(doc, "env", "env"), "env");
  for (const auto& [key, value] : d.env) CheckEnvName(key, "env");
  d.labels = ParseStringMap(GetObject(doc, "labels", "labels"), "labels");
  for (const auto& [key, value] : d.labels) {
    if (key.rfind("tandem.io/", 0) == 0) {
      throw InvalidArgument(fmt::format(
          "labels.{} uses the prefix tandem.io/, which `tandem k8s render` sets itself", key));
    }
  }
  return d;
}

JobDescription LoadJobDescription(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw IoError(
        fmt::format("cannot read the job description {}: {}", path, std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  json doc;
  try {
    doc = json::parse(text.str());
  } catch (const json::parse_error& e) {
    throw InvalidArgument(fmt::format("{} is not valid JSON: {}", path, e.what()));
  }
  try {
    return ParseJobDescription(doc);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("{}: {}", path, e.what()));
  }
}

}  // namespace tandem::cli::k8s
