#include "learning_rate.h"

#include <fmt/format.h>

namespace fashion_mnist {

double LearningRate::At(int64_t num_update) const {
  if (num_update < warmup_steps) {
    return base +
           (target() - base) * static_cast<double>(num_update) / static_cast<double>(warmup_steps);
  }
  return target();
}

tandem::KVParams LearningRate::ServerSgdParams(double momentum, double wd,
                                               int64_t updates_per_step) const {
  tandem::KVParams params = {{"learning_rate", fmt::format("{:.17g}", target())},
                             {"momentum", fmt::format("{:.17g}", momentum)},
                             {"wd", fmt::format("{:.17g}", wd)},
                             {"rescale_grad", "1"}};
  if (warmup_steps > 0) {
    params["lr_scheduler"] = "factor";
    params["lr_scheduler.step"] = "1000000000";
    params["lr_scheduler.factor"] = "1";
    params["lr_scheduler.base_lr"] = fmt::format("{:.17g}", target());
    params["lr_scheduler.warmup_steps"] = fmt::format("{}", warmup_steps * updates_per_step);
    params["lr_scheduler.warmup_begin_lr"] = fmt::format("{:.17g}", base);
    params["lr_scheduler.warmup_mode"] = "linear";
  }
  return params;
}

}  // namespace fashion_mnist
