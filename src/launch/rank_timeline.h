// The timeline (TANDEM_TIMELINE=PATH, docs/metrics.md) of a job whose
// processes another program started: mpirun or srun (`tandem rank-exec`)
// or ssh (`tandem remote-exec`). Each process writes PATH.<pid>, a pid the
// launcher never learns; the program that started it renames the file
// after the process's end to PATH.<label> ("trace.json.worker-3"), a name
// the launcher knows, and the launcher merges the files of every label into
// PATH when the job has ended, or, when they are not all on its host (the
// ranks ran on hosts with disks of their own), says which are missing and
// how to merge them (`tandem timeline merge`).
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launch/child_process.h"
#include "launch/prefixed_output.h"

namespace tandem::launch {

/// PATH.<label> with the label's spaces as dashes: "t.json.worker-3". Pure.
std::string RankTimelineFile(const std::string& path, std::string_view label);

/// After the process `pid` labelled `label` ended: when `env` (its
/// environment) has TANDEM_TIMELINE=PATH and PATH.<pid> exists, renames it
/// to RankTimelineFile(PATH, label). A relative PATH is taken from
/// `directory` (the process's working directory; empty: ours). Returns the
/// new name, or nothing when there was no file; a failed rename is written
/// to stderr and leaves the file. Any thread.
std::optional<std::string> KeepRankTimeline(const std::map<std::string, std::string>& env,
                                            const std::string& directory, pid_t pid,
                                            std::string_view label);

/// One process's timeline file, by the process's label. Thread-safety: a
/// value type.
struct LabelledTimeline {
  std::string label;  ///< "worker 1"
  std::string file;
};

/// Joins the timeline `files` into `path` (base::MergeTimelines, which
/// keeps the complete events of an unfinished file) and removes them, saying
/// so on `sink`: how many of the job's processes it holds, and by label the
/// missing processes (those in `missing`, "(no file)": killed before they
/// created one, or on another host; and those whose file holds no event,
/// "(empty file)") and those whose file was unfinished; both are also
/// recorded in the merged file's otherData. A merge that fails is reported there and
/// leaves the files. Thread: the launcher's.
void MergeTimelineFiles(const std::string& path, const std::vector<LabelledTimeline>& files,
                        const std::vector<std::string>& missing, OutputSink sink);

/// After the job, whose processes are `specs` (BuildLocalJob: labels and
/// environments; the first one's TANDEM_TIMELINE=PATH says whether there
/// is a timeline): merges the files RankTimelineFile(PATH, label) on this
/// host into PATH (MergeTimelineFiles) and removes them, naming the
/// processes whose file is not here (a rank killed before it wrote one, or
/// one that ran on another host: gather those files and merge them with
/// `tandem timeline merge`). A relative
/// PATH is the launcher's working directory's, which is also the ranks'.
/// Reports on `sink` ("[launcher] ..."). Thread: the launcher's.
void MergeRankTimelines(const std::vector<ProcessSpec>& specs, OutputSink sink);

}  // namespace tandem::launch
