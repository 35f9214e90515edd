#include "cluster/mx_config.h"

#include <fmt/format.h>

#include <charconv>
#include <nlohmann/json.hpp>

#include "tandem/error.h"

namespace tandem::cluster {
namespace {

using json = nlohmann::json;

[[noreturn]] void Bad(const std::string& path, const std::string& what) {
  throw ConfigError(fmt::format("MX_CONFIG: {} {}", path, what));
}

const json& Member(const json& object, const std::string& path, const char* name) {
  auto it = object.find(name);
  if (it == object.end()) Bad(path + name, "is missing");
  return *it;
}

int64_t Integer(const json& value, const std::string& path, int64_t min, int64_t max) {
  if (!value.is_number_integer()) Bad(path, fmt::format("is not an integer: {}", value.dump()));
  const int64_t v = value.get<int64_t>();
  if (v < min || v > max) Bad(path, fmt::format("is {}, outside [{}, {}]", v, min, max));
  return v;
}

std::string String(const json& value, const std::string& path) {
  if (!value.is_string()) Bad(path, fmt::format("is not a string: {}", value.dump()));
  return value.get<std::string>();
}

// The number of entries of cluster.<name>, each checked; 0 when absent.
size_t Entries(const json& cluster, const std::string& name) {
  auto it = cluster.find(name);
  if (it == cluster.end() || it->is_null()) return 0;
  const std::string path = "cluster." + name;
  if (!it->is_array()) Bad(path, fmt::format("is not an array: {}", it->dump()));
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string entry = fmt::format("{}[{}]", path, i);
    if (!(*it)[i].is_object()) Bad(entry, "is not an object");
    String(Member((*it)[i], entry + ".", "url"), entry + ".url");
    Integer(Member((*it)[i], entry + ".", "port"), entry + ".port", 1, 65535);
  }
  return it->size();
}

bool SameValue(const std::string& a, const std::string& b) {
  if (a == b) return true;
  int64_t x = 0, y = 0;
  auto [pa, ea] = std::from_chars(a.data(), a.data() + a.size(), x);
  auto [pb, eb] = std::from_chars(b.data(), b.data() + b.size(), y);
  return ea == std::errc() && eb == std::errc() && pa == a.data() + a.size() &&
         pb == b.data() + b.size() && x == y;
}

}  // namespace

MxConfigVariables ParseMxConfig(const std::string& text) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    throw ConfigError(fmt::format("MX_CONFIG is not valid JSON: {}", e.what()));
  }
  if (!doc.is_object()) Bad("(the top level)", "is not an object");
  const json& cluster = Member(doc, "", "cluster");
  if (!cluster.is_object()) Bad("cluster", "is not an object");
  const json& task = Member(doc, "", "task");
  if (!task.is_object()) Bad("task", "is not an object");
  MxConfigVariables out;
  auto set = [&out](const char* name, std::string value, std::string source) {
    out.values[name] = std::move(value);
    out.sources[name] = std::move(source);
  };
  const std::string type = String(Member(task, "task.", "type"), "task.type");
  const int64_t index = Integer(Member(task, "task.", "index"), "task.index", 0, 1 << 20);
  set("DMLC_ROLE", type, "task.type");
  if (Entries(cluster, "scheduler") > 0) {
    const json& scheduler = cluster["scheduler"][0];
    set("DMLC_PS_ROOT_URI", scheduler["url"].get<std::string>(), "cluster.scheduler[0].url");
    set("DMLC_PS_ROOT_PORT", std::to_string(scheduler["port"].get<int64_t>()),
        "cluster.scheduler[0].port");
  }
  set("DMLC_NUM_SERVER", std::to_string(Entries(cluster, "server")), "cluster.server");
  set("DMLC_NUM_WORKER", std::to_string(Entries(cluster, "worker")), "cluster.worker");
  if (type == "worker") set("DMLC_WORKER_ID", std::to_string(index), "task.index");
  if (type == "server") set("DMLC_SERVER_ID", std::to_string(index), "task.index");
  return out;
}

std::map<std::string, std::string> WithMxConfig(const std::map<std::string, std::string>& env) {
  auto it = env.find("MX_CONFIG");
  if (it == env.end()) return env;
  const MxConfigVariables mx = ParseMxConfig(it->second);
  std::map<std::string, std::string> out = env;
  for (const auto& [name, value] : mx.values) {
    auto present = env.find(name);
    if (present == env.end()) {
      out[name] = value;
    } else if (!SameValue(present->second, value)) {
      throw ConfigError(fmt::format("{}={} but MX_CONFIG's {} gives {}", name, present->second,
                                    mx.sources.at(name), value));
    }
  }
  return out;
}

}  // namespace tandem::cluster
