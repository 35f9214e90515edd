#include "base/op_recorder.h"

#include <chrono>

namespace tandem::base {

OpRecorder::OpRecorder(StatsRegistry& stats, std::string histogram, std::string help,
                       Timeline* timeline)
    : stats_(stats), name_(std::move(histogram)), help_(std::move(help)), timeline_(timeline) {}

void OpRecorder::Record(std::string_view op, SteadyTime start, SteadyTime end,
                        const std::map<std::string, std::string>& args) {
  Histogram* h = nullptr;
  {
    std::lock_guard lock(mu_);
    auto it = by_op_.find(op);
    if (it == by_op_.end()) {
      it = by_op_
               .emplace(std::string(op),
                        &stats_.GetHistogram(name_, help_, {{"op", std::string(op)}}))
               .first;
    }
    h = it->second;
  }
  h->Observe(std::chrono::duration<double>(end - start).count());
  if (timeline_) timeline_->Span(op, op, start, end, args);
}

}  // namespace tandem::base
