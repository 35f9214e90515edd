// Fashion-MNIST as the trainer uses it: the images and labels of one split,
// read from the four IDX files of Debian's dataset-fashion-mnist and checked
// against each other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fashion_mnist {

/// Where Debian's dataset-fashion-mnist installs the files.
inline constexpr const char* kDebianDataDir = "/usr/share/datasets/fashion-mnist";

/// Images are kImageSide x kImageSide greyscale bytes; labels are 0..kNumClasses-1.
inline constexpr int kImageSide = 28;
inline constexpr int kNumClasses = 10;

/// One split ("train" or "t10k") of the data set.
///
/// Thread-safety: a plain value.
struct Split {
  int64_t count = 0;            ///< number of examples
  std::vector<uint8_t> pixels;  ///< count * 28 * 28 bytes, example-major
  std::vector<uint8_t> labels;  ///< count labels, each < kNumClasses
};

/// Reads "<dir>/<split>-images-idx3-ubyte[.gz]" and
/// "<dir>/<split>-labels-idx1-ubyte[.gz]" (the .gz name is tried first).
/// Requires split "train" or "t10k". Thread: any. Throws tandem::IoError for
/// what ReadIdxFile throws, for images that are not N x 28 x 28, labels that
/// are not a vector or hold a value >= 10, and a different number of images
/// and labels (naming both files and counts); tandem::InvalidArgument for
/// another split name.
Split LoadSplit(const std::string& dir, const std::string& split);

}  // namespace fashion_mnist
