#include "local_state.h"

#include <fmt/format.h>
#include <torch/serialize.h>

#include <sstream>

#include "tandem/error.h"

namespace fashion_mnist {

std::string SaveLocalState(const std::vector<torch::Tensor>& weights, torch::optim::SGD* sgd) {
  try {
    torch::serialize::OutputArchive archive;
    for (size_t i = 0; i < weights.size(); ++i) {
      archive.write(fmt::format("weight{}", i), weights[i].detach().clone());
    }
    if (sgd != nullptr) {
      torch::serialize::OutputArchive optimizer;
      sgd->save(optimizer);
      archive.write("sgd", optimizer);
    }
    std::ostringstream out;
    archive.save_to(out);
    return out.str();
  } catch (const c10::Error& e) {
    throw tandem::IoError(
        fmt::format("resume state: cannot save the local state: {}", e.what_without_backtrace()));
  }
}

void LoadLocalState(const std::string& bytes, const std::vector<torch::Tensor>& weights,
                    torch::optim::SGD* sgd) {
  try {
    torch::serialize::InputArchive archive;
    std::istringstream in(bytes);
    archive.load_from(in);
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < weights.size(); ++i) {
      torch::Tensor loaded;
      archive.read(fmt::format("weight{}", i), loaded);
      if (loaded.sizes() != weights[i].sizes()) {
        throw tandem::IoError(fmt::format(
            "resume state: parameter {} has {} elements in the checkpoint, the model {}", i,
            loaded.numel(), weights[i].numel()));
      }
      weights[i].copy_(loaded);
    }
    if (sgd != nullptr) {
      torch::serialize::InputArchive optimizer;
      archive.read("sgd", optimizer);
      sgd->load(optimizer);
    }
  } catch (const c10::Error& e) {
    throw tandem::IoError(
        fmt::format("resume state: cannot load the local state: {}", e.what_without_backtrace()));
  }
}

}  // namespace fashion_mnist
