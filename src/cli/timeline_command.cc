// `tandem timeline merge -o OUT FILE...`: joins the per-process timeline
// files of a job (TANDEM_TIMELINE, docs/metrics.md) into one trace, for
// jobs whose processes wrote them on hosts with disks of their own (the
// launcher merges them itself when they are all on its host).
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/timeline.h"
#include "cli/commands.h"

namespace tandem::cli {

void RegisterTimelineCommand(CLI::App& app, CommandBody* body) {
  struct Args {
    std::string output;
    std::vector<std::string> inputs;
  };
  auto args = std::make_shared<Args>();
  auto* timeline = app.add_subcommand("timeline", "Communication timelines (TANDEM_TIMELINE)");
  timeline->require_subcommand(1);
  auto* merge = timeline->add_subcommand(
      "merge",
      "Join the timeline files of a job's processes into one Chrome trace (one track per "
      "process)");
  merge->footer(
      "The files are those TANDEM_TIMELINE=PATH makes each process write (PATH.<pid>, or "
      "PATH.<label> under tandem launch --launcher ssh|mpi|slurm). Timestamps are each host's "
      "monotonic clock: tracks of different hosts do not line up. docs/metrics.md.");
  merge->add_option("-o,--output", args->output, "The merged trace file")->required();
  merge->add_option("files", args->inputs, "The per-process timeline files")
      ->required()
      ->check(CLI::ExistingFile);
  merge->callback([body, args] {
    *body = [args] {
      const base::TimelineMerge merged = base::MergeTimelines(args->output, args->inputs);
      std::string line = fmt::format("timeline of {} processes ({} events) written to {}",
                                     args->inputs.size(), merged.events, args->output);
      for (const auto& f : merged.unfinished) {
        line += fmt::format("; {} was unfinished (its complete events kept)", f);
      }
      for (const auto& f : merged.empty) {
        line += fmt::format("; {} was empty (its process wrote no event; named as missing)", f);
      }
      std::fprintf(stderr, "%s\n", line.c_str());
      return 0;
    };
  });
}

}  // namespace tandem::cli
