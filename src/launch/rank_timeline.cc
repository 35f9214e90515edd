// docs/metrics.md, "The timeline".
#include "launch/rank_timeline.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/timeline.h"

namespace tandem::launch {

std::string RankTimelineFile(const std::string& path, std::string_view label) {
  std::string name(label);
  for (char& c : name) {
    if (c == ' ' || c == '/') c = '-';
  }
  return path + "." + name;
}

std::optional<std::string> KeepRankTimeline(const std::map<std::string, std::string>& env,
                                            const std::string& directory, pid_t pid,
                                            std::string_view label) {
  auto it = env.find("TANDEM_TIMELINE");
  if (it == env.end() || it->second.empty()) return std::nullopt;
  std::string path = it->second;
  if (path.front() != '/' && !directory.empty()) path = directory + "/" + path;
  const std::string written = fmt::format("{}.{}", path, pid);
  if (::access(written.c_str(), F_OK) != 0) return std::nullopt;
  const std::string kept = RankTimelineFile(path, label);
  if (std::rename(written.c_str(), kept.c_str()) != 0) {
    std::fprintf(stderr, "cannot rename the timeline %s of %.*s to %s: %s\n", written.c_str(),
                 static_cast<int>(label.size()), label.data(), kept.c_str(), std::strerror(errno));
    return std::nullopt;
  }
  return kept;
}

void MergeRankTimelines(const std::vector<ProcessSpec>& specs, OutputSink sink) {
  if (specs.empty()) return;
  auto it = specs.front().env.find("TANDEM_TIMELINE");
  if (it == specs.front().env.end() || it->second.empty()) return;
  const std::string& path = it->second;
  std::vector<std::string> present;
  std::vector<std::string> missing;
  std::string all;
  for (const auto& spec : specs) {
    std::string file = RankTimelineFile(path, spec.label);
    all += " " + file;
    (::access(file.c_str(), R_OK) == 0 ? present : missing).push_back(file);
  }
  if (present.empty()) return;
  if (!missing.empty()) {
    sink.WriteLine(fmt::format(
        "[launcher] the timeline files of {} of {} processes are not on this host ({}{}): they "
        "are on the hosts that ran them; gather them and merge with `tandem timeline merge -o "
        "{}{}`\n",
        missing.size(), specs.size(), missing.front(), missing.size() > 1 ? ", ..." : "", path,
        all));
    return;
  }
  MergeTimelineFiles(path, present, sink);
}

void MergeTimelineFiles(const std::string& path, const std::vector<std::string>& files,
                        OutputSink sink) {
  try {
    base::MergeTimelines(path, files);
    for (const auto& f : files) ::unlink(f.c_str());
    sink.WriteLine(
        fmt::format("[launcher] timeline of {} processes written to {}\n", files.size(), path));
  } catch (const std::exception& e) {
    sink.WriteLine(fmt::format(
        "[launcher] could not merge the timeline into {}: {} (the per-process files remain)\n",
        path, e.what()));
  }
}

}  // namespace tandem::launch
