// Optimizer::Create: MXNet's registry of optimizer names (case-insensitive,
// as mx.optimizer.create) for the five optimizers tandem implements.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "kv/optimizer/optimizer_base.h"
#include "tandem/error.h"

namespace tandem::kv {

std::unique_ptr<Optimizer> Optimizer::Create(const std::string& name,
                                             const OptimizerParams& params) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  OptimizerParamReader reader(params, lower);
  std::unique_ptr<Optimizer> optimizer;
  if (lower == "sgd") {
    optimizer = MakeSgdOptimizer(reader);
  } else if (lower == "nag") {
    optimizer = MakeNagOptimizer(reader);
  } else if (lower == "adam") {
    optimizer = MakeAdamOptimizer(reader);
  } else if (lower == "adagrad") {
    optimizer = MakeAdaGradOptimizer(reader);
  } else if (lower == "rmsprop") {
    optimizer = MakeRmsPropOptimizer(reader);
  } else {
    throw InvalidArgument(fmt::format(
        "unknown optimizer '{}'; tandem implements sgd, nag, adam, adagrad and rmsprop", name));
  }
  reader.Finish();
  return optimizer;
}

}  // namespace tandem::kv
