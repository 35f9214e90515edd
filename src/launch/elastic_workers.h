// Elastic worker counts (`tandem launch --workers MIN:MAX`, the shape of
// torchrun's --nnodes MIN:MAX): the job starts MAX workers and goes on
// while at least MIN of them have not failed. Pure; docs/launch.md
// ("Elastic worker counts") is the user's description, docs/elastic.md the
// cluster's side.
//
// The rules, which the scheduler applies to its members and the process
// supervisor to its processes (TANDEM_MIN_WORKERS carries MIN to the
// scheduler, SupervisorOptions::min_workers to the supervisor):
//  - A worker that fails (a non-zero exit or a signal) leaves the job when
//    at least MIN workers remain without it; the others go on.
//  - The workers that remain are those that have not left: one that
//    exited with status 0 has finished its part and still counts (as the
//    scheduler counts it until the job ends), so a worker's failure after
//    another's clean exit is judged as the scheduler judges it.
//  - A failure that would leave fewer than MIN fails the job, as every
//    failure does without --workers, unless a replacement for the worker
//    will start (below) and at least one worker remains: then the job
//    waits, up to --elastic-timeout, for the replacement to join (the
//    scheduler holds the workers' regroup meanwhile and fails the job at
//    the time-out). The failures of the scheduler and the servers always
//    fail the job.
//  - The launcher starts all MAX workers together. In a job without
//    servers, with --max-restarts, it starts a replacement for a worker
//    that left (the same rank's environment), which joins the running job
//    (docs/elastic.md, "Workers that join"); a worker started otherwise (by
//    hand, or by a cluster manager) joins the same way. A replacement's
//    place is the departed worker's: the workers that have not left are
//    MAX less the departures plus the replacements started.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::launch {

/// The worker counts of --workers MIN:MAX (or --workers N: MIN = MAX = N).
/// Thread-safety: a value type.
struct WorkerRange {
  int min = 1;  ///< the fewest workers the job goes on with, >= 1
  int max = 1;  ///< the workers started, >= min

  /// Whether a worker may leave the job: MIN < MAX.
  bool elastic() const { return min < max; }
  /// How the user wrote it, for messages: "--workers 3:4".
  std::string Flag() const;
};

/// The most workers a job may have (as -n).
inline constexpr int kMaxWorkerCount = 1 << 16;

/// Parses the value of --workers: "N" or "MIN:MAX", whole decimal numbers
/// with nothing around them. Throws InvalidArgument quoting the text, e.g.
/// "--workers 5:4: MIN (5) is above MAX (4)", for anything else: not
/// numbers, MIN below 1, MIN above MAX, MAX above kMaxWorkerCount. Pure.
WorkerRange ParseWorkerRange(std::string_view text);

/// Whether a job of `num_workers` workers whose minimum is `min_workers`
/// lets workers leave: 1 <= min_workers < num_workers (0 means "not
/// given", the same as num_workers). Pure.
bool IsElastic(int min_workers, int num_workers);

/// What the supervisor does when a worker fails while nothing else has.
/// Thread-safety: a value type.
struct WorkerLoss {
  /// True: the worker leaves and the job goes on. False: the job fails.
  bool tolerated = false;
  /// With tolerated: the job is below MIN and waits for a replacement.
  bool below_minimum = false;
  /// The workers that have not left once this one has.
  int remaining = 0;
  /// The launcher's line about it (without "[launcher] "):
  /// "worker 3 (pid 12) killed by signal 9 (SIGKILL); the job goes on with
  /// 3 of 4 workers (--workers 3:4)" when tolerated, else "worker 2 (pid
  /// 11) exited with status 1, which leaves 2 of 4 workers, below the
  /// minimum of 3 (--workers 3:4)" (the supervisor adds "; tearing down the
  /// job"), or when it waits "worker 2 (pid 11) exited with status 1, which
  /// leaves 2 of 4 workers, below the minimum of 3 (--workers 3:4): the job
  /// waits up to 600 s for its replacement to join (--elastic-timeout)".
  std::string report;
  /// When not tolerated, why the job fails, for its final line: "2 of 4
  /// workers remained, below the minimum of 3 (--workers 3:4)".
  std::string shortfall;
};

/// Decides about the failure of a worker of `range`, described as
/// `description` (ProcessExit::Describe(): "worker 3 (pid 12) killed by
/// signal 9 (SIGKILL)"), after `left_before` workers have left the job.
/// `replacement_wait` above 0: a replacement for this worker will start,
/// and a job below MIN waits that long for it (--elastic-timeout); 0: a
/// loss below MIN fails the job. Requires: range.elastic(), 0 <=
/// left_before < range.max. Pure.
WorkerLoss DecideWorkerLoss(const WorkerRange& range, int left_before, std::string_view description,
                            std::chrono::milliseconds replacement_wait = {});

/// The workers that left (their descriptions, in the order they left) as
/// the launcher's final line names them: "worker 3 (pid 12) killed by
/// signal 9 (SIGKILL), worker 1 (pid 10) exited with status 1". Pure.
std::string DescribeDepartures(const std::vector<std::string>& departures);

/// The launcher's final line for a job that succeeded after workers left
/// (without "[launcher] "): "job succeeded with 3 of 4 workers (--workers
/// 3:4); left the job: worker 3 (pid 12) killed by signal 9 (SIGKILL)".
/// With `replacements` started for departed workers (--max-restarts):
/// "job succeeded with 4 of 4 workers (--workers 3:4) after 1 replacement;
/// left the job: ...". Requires: departures not empty, 0 <= replacements
/// <= departures.size(). Pure.
std::string ElasticSuccessLine(const WorkerRange& range, const std::vector<std::string>& departures,
                               int replacements = 0);

/// The workers of the launcher's first line ("job ...: scheduler at ...,
/// 2 servers, 4 workers"): "4 workers", "1 worker", or for an elastic job
/// "4 workers (going on with 3 or more: --workers 3:4)", and with
/// `replacements` > 0 (the launcher replaces workers that leave)
/// "4 workers (going on with 3 or more: --workers 3:4; a worker that leaves
/// is replaced, 2 times at most)". Pure.
std::string DescribeWorkerCount(int num_workers, int min_workers, int replacements = 0);

}  // namespace tandem::launch
