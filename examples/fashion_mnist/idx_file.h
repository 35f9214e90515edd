// Reading IDX files, the format of the MNIST and Fashion-MNIST data sets
// (docs/training.md, "The data"): a 4-byte magic (two zero bytes, an element
// type byte, the number of dimensions), one big-endian uint32 per dimension,
// then the elements in row-major order. Debian's dataset-fashion-mnist ships
// them gzipped; ReadIdxFile reads plain and gzipped files alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fashion_mnist {

/// The element type byte of an IDX file. Only kUnsignedByte is read: it is
/// what (Fashion-)MNIST's images and labels use.
inline constexpr uint8_t kIdxUnsignedByte = 0x08;

/// An IDX array of unsigned bytes.
///
/// Thread-safety: a plain value.
struct IdxArray {
  std::vector<uint32_t> dims;  ///< dimensions, outermost first
  std::vector<uint8_t> data;   ///< product(dims) elements, row-major

  /// The product of the dimensions.
  uint64_t num_elements() const;
};

/// Reads the IDX file at `path` (gzip-compressed or plain; told apart by
/// content, not by name). Requires element type 0x08 and 1..4 dimensions.
/// Thread: any. Throws tandem::IoError naming the file and what was wrong:
/// cannot open, unreadable gzip stream, a header shorter than its dimension
/// list, wrong magic (non-zero first bytes), an unsupported element type or
/// dimension count, fewer or more data bytes than the dimensions promise.
IdxArray ReadIdxFile(const std::string& path);

}  // namespace fashion_mnist
