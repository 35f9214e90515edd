#include "checkpoint.h"

#include <fmt/format.h>
#include <torch/serialize.h>

#include <filesystem>
#include <fstream>

#include "tandem/error.h"

namespace fashion_mnist {
namespace {

namespace fs = std::filesystem;

void RenameIntoPlace(const fs::path& tmp, const fs::path& path) {
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    throw tandem::IoError(
        fmt::format("checkpoint: rename {} -> {}: {}", tmp.string(), path.string(), ec.message()));
  }
}

template <typename Saver>
void SaveFile(const fs::path& path, Saver save) {
  const fs::path tmp = path.string() + ".tmp";
  try {
    save(tmp.string());
  } catch (const c10::Error& e) {
    throw tandem::IoError(
        fmt::format("checkpoint: cannot write {}: {}", tmp.string(), e.what_without_backtrace()));
  }
  RenameIntoPlace(tmp, path);
}

std::string ShapeText(c10::IntArrayRef sizes) {
  std::string text = "[";
  for (size_t i = 0; i < sizes.size(); ++i) text += fmt::format("{}{}", i ? ", " : "", sizes[i]);
  return text + "]";
}

}  // namespace

std::string KvOptimizerStatesPath(const std::string& dir) {
  return (fs::path(dir) / "kv-optimizer").string();
}

void SaveCheckpoint(const std::string& dir, int epochs_done,
                    const std::vector<torch::Tensor>& weights, torch::optim::SGD* sgd) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw tandem::IoError(fmt::format("checkpoint: cannot create {}: {}", dir, ec.message()));
  std::vector<torch::Tensor> copies;
  for (const torch::Tensor& w : weights) copies.push_back(w.detach().clone());
  SaveFile(fs::path(dir) / "weights.pt", [&](const std::string& p) { torch::save(copies, p); });
  if (sgd != nullptr) {
    SaveFile(fs::path(dir) / "worker-sgd.pt", [&](const std::string& p) { torch::save(*sgd, p); });
  }
  const fs::path epoch = fs::path(dir) / "epoch";
  const fs::path tmp = epoch.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << epochs_done << "\n";
    out.flush();
    if (!out) throw tandem::IoError(fmt::format("checkpoint: cannot write {}", tmp.string()));
  }
  RenameIntoPlace(tmp, epoch);
}

int LoadCheckpoint(const std::string& dir, const std::vector<torch::Tensor>& weights,
                   torch::optim::SGD* sgd) {
  const fs::path epoch_path = fs::path(dir) / "epoch";
  std::ifstream in(epoch_path);
  int epochs_done = -1;
  if (!(in >> epochs_done) || epochs_done < 0) {
    throw tandem::IoError(
        fmt::format("checkpoint: no complete checkpoint in {} ({} is missing or unreadable)", dir,
                    epoch_path.string()));
  }
  const fs::path weights_path = fs::path(dir) / "weights.pt";
  std::vector<torch::Tensor> loaded;
  try {
    torch::load(loaded, weights_path.string());
  } catch (const c10::Error& e) {
    throw tandem::IoError(fmt::format("checkpoint: cannot read {}: {}", weights_path.string(),
                                      e.what_without_backtrace()));
  }
  if (loaded.size() != weights.size()) {
    throw tandem::IoError(fmt::format("checkpoint: {} holds {} tensors; the model has {}",
                                      weights_path.string(), loaded.size(), weights.size()));
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (loaded[i].sizes() != weights[i].sizes()) {
      throw tandem::IoError(fmt::format(
          "checkpoint: parameter {} in {} has shape {}; the model's is {}", i,
          weights_path.string(), ShapeText(loaded[i].sizes()), ShapeText(weights[i].sizes())));
    }
    weights[i].copy_(loaded[i]);
  }
  const fs::path sgd_path = fs::path(dir) / "worker-sgd.pt";
  if (sgd != nullptr && fs::exists(sgd_path)) {
    try {
      torch::load(*sgd, sgd_path.string());
    } catch (const c10::Error& e) {
      throw tandem::IoError(fmt::format("checkpoint: cannot read {}: {}", sgd_path.string(),
                                        e.what_without_backtrace()));
    }
  }
  return epochs_done;
}

}  // namespace fashion_mnist
