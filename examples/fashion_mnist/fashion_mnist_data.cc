#include "fashion_mnist_data.h"

#include <fmt/format.h>

#include <filesystem>

#include "idx_file.h"
#include "tandem/error.h"

namespace fashion_mnist {
namespace {

// "<dir>/<stem>.gz" when it exists, else "<dir>/<stem>" (whose absence
// ReadIdxFile then reports).
std::string FindFile(const std::string& dir, const std::string& stem) {
  const std::filesystem::path base = std::filesystem::path(dir) / stem;
  std::filesystem::path gz = base;
  gz += ".gz";
  std::error_code ec;
  return std::filesystem::exists(gz, ec) ? gz.string() : base.string();
}

}  // namespace

Split LoadSplit(const std::string& dir, const std::string& split) {
  if (split != "train" && split != "t10k") {
    throw tandem::InvalidArgument(
        fmt::format("Fashion-MNIST split '{}' does not exist (train or t10k)", split));
  }
  const std::string images_path = FindFile(dir, split + "-images-idx3-ubyte");
  const std::string labels_path = FindFile(dir, split + "-labels-idx1-ubyte");
  IdxArray images = ReadIdxFile(images_path);
  IdxArray labels = ReadIdxFile(labels_path);
  if (images.dims.size() != 3 || images.dims[1] != kImageSide || images.dims[2] != kImageSide) {
    std::string shape;
    for (size_t i = 0; i < images.dims.size(); ++i) {
      shape += fmt::format("{}{}", i == 0 ? "" : " x ", images.dims[i]);
    }
    throw tandem::IoError(fmt::format("images file {}: shape {}; expected N x {} x {}", images_path,
                                      shape, kImageSide, kImageSide));
  }
  if (labels.dims.size() != 1) {
    throw tandem::IoError(fmt::format("labels file {}: {} dimensions; expected 1 (a vector)",
                                      labels_path, labels.dims.size()));
  }
  if (images.dims[0] != labels.dims[0]) {
    throw tandem::IoError(
        fmt::format("count mismatch: images file {} holds {} images, labels file "
                    "{} holds {} labels",
                    images_path, images.dims[0], labels_path, labels.dims[0]));
  }
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= kNumClasses) {
      throw tandem::IoError(
          fmt::format("labels file {}: label {} of example {} is not a class "
                      "(0..{})",
                      labels_path, labels.data[i], i, kNumClasses - 1));
    }
  }
  Split result;
  result.count = images.dims[0];
  result.pixels = std::move(images.data);
  result.labels = std::move(labels.data);
  return result;
}

}  // namespace fashion_mnist
