#include "base/timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "tandem/error.h"

namespace tandem::base {
namespace {

constexpr size_t kFlushBytes = 64 * 1024;

int64_t Micros(SteadyTime t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

}  // namespace

Timeline::Timeline(const std::string& path, int pid, const std::string& process_name)
    : path_(path), pid_(pid) {
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) {
    throw IoError(
        fmt::format("cannot create the timeline file {}: {}", path, std::strerror(errno)));
  }
  buffer_ = "{\"traceEvents\": [\n";
  SetProcessName(process_name);
}

Timeline::~Timeline() {
  try {
    Close();
  } catch (const std::exception&) {
    // A destructor cannot report; Close() is there for callers who care.
  }
}

void Timeline::SetProcessName(const std::string& name) {
  std::lock_guard lock(mu_);
  nlohmann::json e = {
      {"name", "process_name"}, {"ph", "M"}, {"pid", pid_}, {"args", {{"name", name}}}};
  Append(e.dump());
}

int Timeline::TrackId(std::string_view track) {
  auto it = tracks_.find(track);
  if (it != tracks_.end()) return it->second;
  int id = static_cast<int>(tracks_.size()) + 1;
  tracks_.emplace(std::string(track), id);
  nlohmann::json e = {{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", pid_},
                      {"tid", id},
                      {"args", {{"name", std::string(track)}}}};
  Append(e.dump());
  return id;
}

void Timeline::Span(std::string_view track, std::string_view name, SteadyTime start, SteadyTime end,
                    const std::map<std::string, std::string>& args) {
  std::lock_guard lock(mu_);
  if (file_ == nullptr) return;
  nlohmann::json e = {{"name", std::string(name)},
                      {"cat", std::string(track)},
                      {"ph", "X"},
                      {"ts", Micros(start)},
                      {"dur", std::max<int64_t>(0, Micros(end) - Micros(start))},
                      {"pid", pid_},
                      {"tid", TrackId(track)}};
  if (!args.empty()) e["args"] = args;
  Append(e.dump());
}

void Timeline::Instant(std::string_view track, std::string_view name, SteadyTime at) {
  std::lock_guard lock(mu_);
  if (file_ == nullptr) return;
  nlohmann::json e = {{"name", std::string(name)},
                      {"cat", std::string(track)},
                      {"ph", "i"},
                      {"s", "t"},
                      {"ts", Micros(at)},
                      {"pid", pid_},
                      {"tid", TrackId(track)}};
  Append(e.dump());
}

void Timeline::Append(std::string event) {
  if (file_ == nullptr) return;
  if (!first_) buffer_ += ",\n";
  first_ = false;
  buffer_ += event;
  ++events_;
  if (buffer_.size() >= kFlushBytes) FlushLocked();
}

void Timeline::FlushLocked() {
  if (file_ == nullptr || buffer_.empty()) return;
  size_t n = std::fwrite(buffer_.data(), 1, buffer_.size(), file_);
  buffer_.clear();
  if (n == 0 || std::fflush(file_) != 0) {
    int err = errno;
    std::fclose(file_);
    file_ = nullptr;
    throw IoError(fmt::format("cannot write the timeline file {}: {}", path_, std::strerror(err)));
  }
}

void Timeline::Close() {
  std::lock_guard lock(mu_);
  if (file_ == nullptr) return;
  buffer_ += "\n]}\n";
  FlushLocked();
  if (std::fclose(file_) != 0) {
    file_ = nullptr;
    throw IoError(
        fmt::format("cannot close the timeline file {}: {}", path_, std::strerror(errno)));
  }
  file_ = nullptr;
}

uint64_t Timeline::events() const {
  std::lock_guard lock(mu_);
  return events_;
}

namespace {

// The events of a trace file as Timeline writes it: the whole document when
// it parses, else (a process killed before Close) every complete event line
// after the header, a cut last line dropped. Sets `unfinished` then.
std::vector<nlohmann::json> ReadTraceEvents(const std::string& path, bool* unfinished) {
  std::ifstream in(path);
  if (!in) throw IoError(fmt::format("cannot read the timeline file {}", path));
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  nlohmann::json doc = nlohmann::json::parse(all, nullptr, /*allow_exceptions=*/false);
  std::vector<nlohmann::json> events;
  *unfinished = false;
  if (!doc.is_discarded()) {
    if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
      throw InvalidArgument(
          fmt::format("{} is not a trace file (a JSON object with a traceEvents array)", path));
    }
    for (auto& e : doc["traceEvents"]) events.push_back(std::move(e));
    return events;
  }
  if (all.find_first_not_of(" \t\r\n") == std::string::npos) {
    *unfinished = true;  // killed before its first flush
    return events;
  }
  const size_t header = all.find("{\"traceEvents\": [");
  if (header != 0) {
    throw InvalidArgument(fmt::format(
        "{} is not a trace file: it neither parses as JSON nor starts as a tandem timeline does",
        path));
  }
  *unfinished = true;
  std::istringstream lines(all.substr(all.find('\n') + 1));
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == ',') line.pop_back();
    nlohmann::json e = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!e.is_discarded() && e.is_object()) events.push_back(std::move(e));
  }
  return events;
}

}  // namespace

TimelineMerge MergeTimelines(const std::string& output, const std::vector<std::string>& inputs,
                             const std::vector<std::string>& missing,
                             const std::vector<std::string>& labels) {
  std::vector<std::string> unfinished_names;
  std::vector<std::string> missing_names = missing;
  TimelineMerge result;
  nlohmann::json merged = {{"traceEvents", nlohmann::json::array()}};
  std::set<int64_t> used_pids;
  int64_t highest_pid = 4194304;  // above Linux's pid_max: a new number is nobody's pid
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string& path = inputs[i];
    bool unfinished = false;
    std::vector<nlohmann::json> events = ReadTraceEvents(path, &unfinished);
    const std::string& name = labels.size() == inputs.size() ? labels[i] : path;
    if (unfinished && events.empty()) {
      result.empty.push_back(path);
      missing_names.push_back(name);
    } else if (unfinished) {
      result.unfinished.push_back(path);
      unfinished_names.push_back(name);
    }
    // Files from different hosts may carry the same pid: a pid taken by an
    // earlier file gets a new number, so each process keeps a track of its own.
    std::map<int64_t, int64_t> renumbered;
    for (auto& e : events) {
      if (e.is_object() && e.contains("pid") && e["pid"].is_number_integer()) {
        const int64_t pid = e["pid"].get<int64_t>();
        auto [it, fresh] = renumbered.emplace(pid, pid);
        if (fresh && used_pids.count(pid) != 0) it->second = ++highest_pid;
        e["pid"] = it->second;
      }
      merged["traceEvents"].push_back(std::move(e));
      ++result.events;
    }
    for (const auto& [from, to] : renumbered) {
      used_pids.insert(to);
      highest_pid = std::max(highest_pid, to);
    }
  }
  if (!missing_names.empty() || !result.unfinished.empty()) {
    merged["otherData"] = {{"tandem_missing", missing_names},
                           {"tandem_unfinished", unfinished_names}};
  }
  std::ofstream out(output, std::ios::trunc);
  if (!out) throw IoError(fmt::format("cannot create the timeline file {}", output));
  out << merged.dump() << "\n";
  if (!out.flush()) throw IoError(fmt::format("cannot write the timeline file {}", output));
  return result;
}

}  // namespace tandem::base
