#include "k8s/job_description.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "k8s/json_scan.h"
#include "tandem/error.h"

namespace tandem::k8s {
namespace {

using nlohmann::json;

const char* TypeName(const json& v) { return v.type_name(); }

// A value as an error message shows it: a scalar as JSON with its type
// ("\"4\" (string)"), an array or object by its size only, so that a
// message never walks a value of unbounded depth.
std::string Shown(const json& v) {
  if (v.is_array()) {
    return v.empty() ? "an empty array" : fmt::format("an array of {} element(s)", v.size());
  }
  if (v.is_object()) {
    return v.empty() ? "an empty object" : fmt::format("an object of {} member(s)", v.size());
  }
  if (v.is_number_float() && !std::isfinite(v.get<double>())) {
    return "a number beyond a double's range";
  }
  return fmt::format("{} ({})", v.dump(-1, ' ', false, json::error_handler_t::replace),
                     TypeName(v));
}

// A field that holds a count or a port, and its range (docs/deploy.md, "The
// job description", states these). The text reader names the range when such
// a field holds a number too large for JSON.
struct WholeNumberField {
  std::string_view path;
  int64_t min;
  int64_t max;
};

constexpr WholeNumberField kWholeNumberFields[] = {
    {"workers", 1, 1 << 16},    {"min_workers", 1, 1 << 16}, {"processes_per_node", 1, 4096},
    {"servers", 1, 1 << 16},    {"port", 1, 65535},          {"metrics_port", 0, 65535},
    {"backoff_limit", 0, 1000}, {"resources.gpus", 0, 1024}, {"server_resources.gpus", 0, 1024},
};

// The range of the whole-number field at `path`; nullptr for any other path.
const WholeNumberField* FindWholeNumberField(std::string_view path) {
  for (const auto& f : kWholeNumberFields) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

// The entry of kWholeNumberFields for `path`, which must be one of them.
const WholeNumberField& WholeNumber(std::string_view path) {
  const WholeNumberField* f = FindWholeNumberField(path);
  if (f == nullptr) {
    throw std::logic_error(fmt::format("{} is not in kWholeNumberFields", path));
  }
  return *f;
}

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
    throw InvalidArgument(fmt::format("{} must be a string, got {}", where, Shown(*it)));
  }
  return it->get<std::string>();
}

// The whole number `object[field]` in range.min..range.max; `fallback` when
// absent or null. Fractions (2.5, also 2.0), numbers beyond int64 and other
// types are refused with the range in the message.
int64_t GetInt(const json& object, const std::string& field, int64_t fallback,
               const WholeNumberField& range) {
  auto it = object.find(field);
  if (it == object.end() || it->is_null()) return fallback;
  bool in_range = false;
  if (it->is_number_unsigned()) {
    const uint64_t u = it->get<uint64_t>();
    in_range = u <= static_cast<uint64_t>(range.max) && static_cast<int64_t>(u) >= range.min;
  } else if (it->is_number_integer()) {
    in_range = it->get<int64_t>() >= range.min && it->get<int64_t>() <= range.max;
  }
  if (!in_range) {
    throw InvalidArgument(fmt::format("{} must be a whole number in {}..{}, got {}", range.path,
                                      range.min, range.max, Shown(*it)));
  }
  return it->get<int64_t>();
}

bool GetBool(const json& object, const std::string& field, bool fallback,
             const std::string& where) {
  auto it = object.find(field);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    throw InvalidArgument(fmt::format("{} must be true or false, got {}", where, Shown(*it)));
  }
  return it->get<bool>();
}

const json& GetObject(const json& object, const std::string& field, const std::string& where) {
  static const json kEmpty = json::object();
  auto it = object.find(field);
  if (it == object.end() || it->is_null()) return kEmpty;
  if (!it->is_object()) {
    throw InvalidArgument(fmt::format("{} must be an object, got {}", where, Shown(*it)));
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
  r.gpus = static_cast<int>(GetInt(object, "gpus", fallback.gpus, WholeNumber(where + ".gpus")));
  return r;
}

std::map<std::string, std::string> ParseStringMap(const json& object, const std::string& where) {
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : object.items()) {
    if (!value.is_string()) {
      throw InvalidArgument(
          fmt::format("{}.{} must be a string, got {}", where, key, Shown(value)));
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
  if (strategy == Strategy::kParameterServer) return 1 + servers + workers;
  return Elastic() ? 1 + workers : workers;  // an elastic job's scheduler has a pod of its own
}

const char* StrategyName(Strategy strategy) {
  return strategy == Strategy::kParameterServer ? "parameter-server" : "collectives";
}

namespace {

// Reads the job's name, namespace, image and the workers' command into `d`.
void ParseIdentity(const json& doc, JobDescription& d) {
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
        fmt::format("command must be a non-empty array of strings, got {}", Shown(*command)));
  }
  for (size_t i = 0; i < command->size(); ++i) {
    const auto& arg = (*command)[i];
    if (!arg.is_string()) {
      throw InvalidArgument(fmt::format("command[{}] must be a string, got {}", i, Shown(arg)));
    }
    d.command.push_back(arg.get<std::string>());
  }
  if (d.command[0].empty()) throw InvalidArgument("command[0] must name a program, got ''");
}

// Reads the strategy, how many workers (and processes per node) and servers, the rendezvous port
// into `d`.
void ParseShape(const json& doc, JobDescription& d) {
  std::string strategy = GetString(doc, "strategy", "collectives", "strategy");
  if (strategy == "parameter-server") {
    d.strategy = Strategy::kParameterServer;
  } else if (strategy == "collectives") {
    d.strategy = Strategy::kCollectives;
  } else {
    throw InvalidArgument(
        fmt::format("strategy must be 'parameter-server' or 'collectives', got '{}'", strategy));
  }
  d.workers = static_cast<int>(GetInt(doc, "workers", 1, WholeNumber("workers")));
  const WholeNumberField min_workers{"min_workers", 1, d.workers};
  d.min_workers = static_cast<int>(GetInt(doc, "min_workers", d.workers, min_workers));
  d.processes_per_node =
      static_cast<int>(GetInt(doc, "processes_per_node", 1, WholeNumber("processes_per_node")));
  d.cluster_runtime = GetBool(doc, "cluster_runtime", false, "cluster_runtime");
  if (d.strategy == Strategy::kParameterServer) {
    d.servers = static_cast<int>(GetInt(doc, "servers", 1, WholeNumber("servers")));
  } else {
    const WholeNumberField any_count{"servers", 0, WholeNumber("servers").max};
    d.servers = static_cast<int>(GetInt(doc, "servers", 0, any_count));
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
  d.port = static_cast<int>(GetInt(doc, "port", default_port, WholeNumber("port")));
}

// Reads what each pod asks for: resources, GPUs, shared memory, the host network into `d`.
void ParsePods(const json& doc, JobDescription& d) {
  d.worker_resources = ParseResources(GetObject(doc, "resources", "resources"), "resources", {});
  Resources server_fallback = d.worker_resources;
  server_fallback.gpus = 0;
  d.server_resources = ParseResources(GetObject(doc, "server_resources", "server_resources"),
                                      "server_resources", server_fallback);
  if (d.strategy == Strategy::kCollectives && !d.Elastic() && doc.contains("server_resources")) {
    throw InvalidArgument(
        "server_resources is for strategy 'parameter-server' and for an elastic job's scheduler "
        "(min_workers below workers); other collectives jobs have no servers and no scheduler");
  }
  d.node_selector =
      ParseStringMap(GetObject(doc, "node_selector", "node_selector"), "node_selector");
  d.server_node_selector = ParseStringMap(
      GetObject(doc, "server_node_selector", "server_node_selector"), "server_node_selector");
  if (d.strategy == Strategy::kCollectives && !d.Elastic() &&
      doc.contains("server_node_selector")) {
    throw InvalidArgument(
        "server_node_selector is for strategy 'parameter-server' and for an elastic job's "
        "scheduler "
        "(min_workers below workers); other collectives jobs have no servers and no scheduler");
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
}

// Reads the volume checkpoints are written to into `d`.
void ParseCheckpoint(const json& doc, JobDescription& d) {
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
}

// Reads the metrics port and what a failed pod does (restart policy, backoff limit) into `d`.
void ParseRestarts(const json& doc, JobDescription& d) {
  d.metrics_port = static_cast<int>(GetInt(doc, "metrics_port", 0, WholeNumber("metrics_port")));
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
  d.backoff_limit = static_cast<int>(GetInt(doc, "backoff_limit", 3, WholeNumber("backoff_limit")));
}

// Reads the Secret that holds the job's TANDEM_SECRET into `d`.
void ParseSecret(const json& doc, JobDescription& d) {
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
}

// Reads gang scheduling (Volcano), its queue and priority class into `d`.
void ParseGangScheduling(const json& doc, JobDescription& d) {
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
}

// Reads the processes' extra environment and the pods' extra labels into `d`.
void ParseEnvAndLabels(const json& doc, JobDescription& d) {
  d.env = ParseStringMap(GetObject(doc, "env", "env"), "env");
  for (const auto& [key, value] : d.env) CheckEnvName(key, "env");
  d.labels = ParseStringMap(GetObject(doc, "labels", "labels"), "labels");
  for (const auto& [key, value] : d.labels) {
    if (key.rfind("tandem.io/", 0) == 0) {
      throw InvalidArgument(fmt::format(
          "labels.{} uses the prefix tandem.io/, which `tandem k8s render` sets itself", key));
    }
  }
}

}  // namespace

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
                    "min_workers",
                    "processes_per_node",
                    "cluster_runtime",
                    "servers",
                    "command_runs_all_roles",
                    "port",
                    "resources",
                    "server_resources",
                    "node_selector",
                    "server_node_selector",
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
  ParseIdentity(doc, d);
  ParseShape(doc, d);
  ParsePods(doc, d);
  ParseCheckpoint(doc, d);
  ParseRestarts(doc, d);
  ParseSecret(doc, d);
  ParseGangScheduling(doc, d);
  ParseEnvAndLabels(doc, d);
  return d;
}

JobDescription ParseJobDescriptionText(std::string_view text, const std::string& source) {
  const JsonScanFinding found = ScanJsonText(text, kMaxJobDescriptionDepth);
  const std::string at =
      fmt::format("at byte {} (line {}, column {})", found.byte, found.line, found.column);
  if (found.kind == JsonScanFinding::Kind::kTooDeep) {
    throw InvalidArgument(fmt::format("{}: {} nests deeper than {} levels of arrays and objects {}",
                                      source, found.path.empty() ? "the top level" : found.path,
                                      kMaxJobDescriptionDepth, at));
  }
  if (found.kind == JsonScanFinding::Kind::kNumberOverflow) {
    const WholeNumberField* range = FindWholeNumberField(found.path);
    if (range != nullptr) {
      throw InvalidArgument(fmt::format(
          "{}: {} must be a whole number in {}..{}, got {} (beyond a double's range) {}", source,
          range->path, range->min, range->max, found.token, at));
    }
    throw InvalidArgument(fmt::format("{}: {} holds {}, a number beyond a double's range {}",
                                      source, found.path.empty() ? "the top level" : found.path,
                                      found.token, at));
  }
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    // Past nlohmann's "[json.exception.parse_error.101] " comes its own
    // "parse error at line L, column C: " and what it expected there.
    std::string why = e.what();
    const size_t prefix = why.find("] ");
    if (prefix != std::string::npos) why = why.substr(prefix + 2);
    const std::string near = JsonPathAt(text, e.byte);
    throw InvalidArgument(fmt::format("{}: not valid JSON at byte {}{}: {}", source, e.byte,
                                      near.empty() ? "" : " (in " + near + ")", why));
  } catch (const json::exception& e) {
    throw InvalidArgument(fmt::format("{}: not valid JSON: {}", source, e.what()));
  }
  try {
    return ParseJobDescription(doc);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("{}: {}", source, e.what()));
  }
}

JobDescription LoadJobDescription(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw IoError(
        fmt::format("cannot read the job description {}: {}", path, std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseJobDescriptionText(text.str(), path);
}

}  // namespace tandem::k8s
