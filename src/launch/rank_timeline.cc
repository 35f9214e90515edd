// docs/metrics.md, "The timeline".
#include "launch/rank_timeline.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/timeline.h"

namespace tandem::launch {
namespace {

// The labels of those `files` whose path is in `paths`, in the files' order.
std::vector<std::string> LabelsOf(const std::vector<LabelledTimeline>& files,
                                  const std::vector<std::string>& paths) {
  std::vector<std::string> labels;
  for (const auto& f : files) {
    if (std::find(paths.begin(), paths.end(), f.file) != paths.end()) labels.push_back(f.label);
  }
  return labels;
}

}  // namespace

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
  std::vector<LabelledTimeline> present;
  std::vector<std::string> missing;
  for (const auto& spec : specs) {
    std::string file = RankTimelineFile(path, spec.label);
    if (::access(file.c_str(), R_OK) == 0) {
      present.push_back({spec.label, std::move(file)});
    } else {
      missing.push_back(spec.label);
    }
  }
  if (present.empty()) return;
  MergeTimelineFiles(path, present, missing, sink);
  if (!missing.empty()) {
    sink.WriteLine(fmt::format(
        "[launcher] a process that ran on another host keeps its timeline there as {}: gather "
        "those and merge them with this one: `tandem timeline merge -o all.json {} FILES...`\n",
        RankTimelineFile(path, "<label>"), path));
  }
}

void MergeTimelineFiles(const std::string& path, const std::vector<LabelledTimeline>& files,
                        const std::vector<std::string>& missing, OutputSink sink) {
  std::vector<std::string> inputs;
  std::vector<std::string> labels;
  for (const auto& f : files) {
    inputs.push_back(f.file);
    labels.push_back(f.label);
  }
  try {
    const base::TimelineMerge merged = base::MergeTimelines(path, inputs, missing, labels);
    for (const auto& f : inputs) ::unlink(f.c_str());
    // A process whose file holds no event (killed before its first write)
    // is as missing as one without a file.
    std::vector<std::string> absent;
    for (const auto& label : missing) absent.push_back(label + " (no file)");
    for (const auto& label : LabelsOf(files, merged.empty))
      absent.push_back(label + " (empty file)");
    std::string line = fmt::format(
        "[launcher] timeline: merged {} of {} processes ({} events) into {}",
        files.size() - merged.empty.size(), files.size() + missing.size(), merged.events, path);
    if (!absent.empty()) line += fmt::format("; missing: {}", fmt::join(absent, ", "));
    if (!merged.unfinished.empty()) {
      line += fmt::format("; unfinished (killed before closing it; its complete events kept): {}",
                          fmt::join(LabelsOf(files, merged.unfinished), ", "));
    }
    sink.WriteLine(line + "\n");
  } catch (const std::exception& e) {
    sink.WriteLine(fmt::format(
        "[launcher] could not merge the timeline into {}: {} (the per-process files remain)\n",
        path, e.what()));
  }
}

}  // namespace tandem::launch
