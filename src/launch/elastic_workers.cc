#include "launch/elastic_workers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <optional>

#include "tandem/error.h"

namespace tandem::launch {
namespace {

// A whole decimal number and nothing else; nothing for "", "x", "+3", "3 ".
std::optional<int> WholeNumber(std::string_view text) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

std::string Workers(int n) { return n == 1 ? "1 worker" : fmt::format("{} workers", n); }

}  // namespace

std::string WorkerRange::Flag() const {
  return min == max ? fmt::format("--workers {}", max) : fmt::format("--workers {}:{}", min, max);
}

WorkerRange ParseWorkerRange(std::string_view text) {
  const size_t colon = text.find(':');
  const std::optional<int> first = WholeNumber(text.substr(0, colon));
  const std::optional<int> second =
      colon == std::string_view::npos ? first : WholeNumber(text.substr(colon + 1));
  if (!first || !second) {
    throw InvalidArgument(
        fmt::format("--workers '{}' is not a number of workers: give --workers N, or --workers "
                    "MIN:MAX to start MAX workers and go on while MIN of them remain (e.g. "
                    "--workers 3:4)",
                    text));
  }
  WorkerRange range{*first, *second};
  if (colon == std::string_view::npos && range.max < 1) {
    throw InvalidArgument(fmt::format("--workers {}: a job needs at least 1 worker", text));
  }
  if (range.min < 1) {
    throw InvalidArgument(fmt::format(
        "--workers {}: MIN must be at least 1 (the job fails when its last worker is lost)", text));
  }
  if (range.min > range.max) {
    throw InvalidArgument(fmt::format(
        "--workers {}: MIN ({}) is above MAX ({}); MIN:MAX starts MAX workers and goes on while "
        "MIN of them remain",
        text, range.min, range.max));
  }
  if (range.max > kMaxWorkerCount) {
    throw InvalidArgument(fmt::format("--workers {}: at most {} workers", text, kMaxWorkerCount));
  }
  return range;
}

bool IsElastic(int min_workers, int num_workers) {
  return min_workers >= 1 && min_workers < num_workers;
}

WorkerLoss DecideWorkerLoss(const WorkerRange& range, int left_before, std::string_view description,
                            std::chrono::milliseconds replacement_wait) {
  WorkerLoss loss;
  loss.remaining = range.max - left_before - 1;
  loss.tolerated = loss.remaining >= range.min;
  if (loss.tolerated) {
    loss.report = fmt::format("{}; the job goes on with {} of {} ({})", description, loss.remaining,
                              Workers(range.max), range.Flag());
    return loss;
  }
  loss.report = fmt::format("{}, which leaves {} of {}, below the minimum of {} ({})", description,
                            loss.remaining, Workers(range.max), range.min, range.Flag());
  if (loss.remaining >= 1 && replacement_wait.count() > 0) {
    loss.tolerated = true;
    loss.below_minimum = true;
    loss.report += fmt::format(
        ": the job waits up to {:g} s for its replacement to join "
        "(--elastic-timeout)",
        std::chrono::duration<double>(replacement_wait).count());
    return loss;
  }
  loss.shortfall = fmt::format("{} of {} remained, below the minimum of {} ({})", loss.remaining,
                               Workers(range.max), range.min, range.Flag());
  return loss;
}

std::string DescribeDepartures(const std::vector<std::string>& departures) {
  return fmt::format("{}", fmt::join(departures, ", "));
}

std::string ElasticSuccessLine(const WorkerRange& range, const std::vector<std::string>& departures,
                               int replacements) {
  const std::string after = replacements == 0 ? std::string()
                                              : fmt::format(" after {} replacement{}", replacements,
                                                            replacements == 1 ? "" : "s");
  return fmt::format("job succeeded with {} of {} ({}){}; left the job: {}",
                     range.max - static_cast<int>(departures.size()) + replacements,
                     Workers(range.max), range.Flag(), after, DescribeDepartures(departures));
}

std::string DescribeWorkerCount(int num_workers, int min_workers, int replacements) {
  if (!IsElastic(min_workers, num_workers)) return Workers(num_workers);
  const std::string replaced =
      replacements <= 0
          ? std::string()
          : fmt::format("; a worker that leaves is replaced, {} at most",
                        replacements == 1 ? "once" : fmt::format("{} times", replacements));
  return fmt::format("{} (going on with {} or more: {}{})", Workers(num_workers), min_workers,
                     WorkerRange{min_workers, num_workers}.Flag(), replaced);
}

}  // namespace tandem::launch
