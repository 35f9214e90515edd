#include "idx_file.h"

#include <fmt/format.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "tandem/error.h"

namespace fashion_mnist {
namespace {

constexpr size_t kHeaderBytes = 4;
constexpr int kMaxDims = 4;

struct GzCloser {
  void operator()(gzFile_s* file) const { gzclose(file); }
};

// The whole decompressed content. gzread passes a file that is not gzip
// through unchanged, so plain IDX files read the same way. The size comes
// from the stream, never from the header, so a lying header cannot make us
// allocate.
std::vector<uint8_t> ReadAllBytes(const std::string& path) {
  errno = 0;
  std::unique_ptr<gzFile_s, GzCloser> file(gzopen(path.c_str(), "rb"));
  if (!file) {
    throw tandem::IoError(fmt::format("IDX file {}: cannot open: {}", path,
                                      errno != 0 ? std::strerror(errno) : "out of memory"));
  }
  std::vector<uint8_t> bytes;
  constexpr unsigned kChunk = 1 << 20;
  for (;;) {
    const size_t old_size = bytes.size();
    bytes.resize(old_size + kChunk);
    const int got = gzread(file.get(), bytes.data() + old_size, kChunk);
    if (got < 0) {
      int code = 0;
      const char* message = gzerror(file.get(), &code);
      throw tandem::IoError(
          fmt::format("IDX file {}: cannot read (corrupt gzip stream?): {}", path, message));
    }
    bytes.resize(old_size + static_cast<size_t>(got));
    if (got == 0) break;
  }
  int code = Z_OK;
  const char* message = gzerror(file.get(), &code);
  if (code != Z_OK) {
    throw tandem::IoError(
        fmt::format("IDX file {}: truncated or corrupt gzip stream: {}", path, message));
  }
  return bytes;
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

uint64_t IdxArray::num_elements() const {
  uint64_t n = 1;
  for (uint32_t d : dims) n *= d;
  return n;
}

IdxArray ReadIdxFile(const std::string& path) {
  std::vector<uint8_t> bytes = ReadAllBytes(path);
  if (bytes.size() < kHeaderBytes) {
    throw tandem::IoError(
        fmt::format("IDX file {}: truncated header: {} bytes, the magic alone takes {}", path,
                    bytes.size(), kHeaderBytes));
  }
  if (bytes[0] != 0 || bytes[1] != 0) {
    throw tandem::IoError(fmt::format(
        "IDX file {}: wrong magic {:02x} {:02x} {:02x} {:02x}: an IDX file starts with two zero "
        "bytes (is it an IDX file?)",
        path, bytes[0], bytes[1], bytes[2], bytes[3]));
  }
  const uint8_t type = bytes[2];
  const int num_dims = bytes[3];
  if (type != kIdxUnsignedByte) {
    throw tandem::IoError(fmt::format(
        "IDX file {}: element type 0x{:02x} is not supported (only 0x08, unsigned byte)", path,
        type));
  }
  if (num_dims < 1 || num_dims > kMaxDims) {
    throw tandem::IoError(
        fmt::format("IDX file {}: {} dimensions; expected 1 to {}", path, num_dims, kMaxDims));
  }
  const size_t header = kHeaderBytes + 4 * static_cast<size_t>(num_dims);
  if (bytes.size() < header) {
    throw tandem::IoError(fmt::format(
        "IDX file {}: truncated header: {} dimensions need {} header bytes, the file has {}", path,
        num_dims, header, bytes.size()));
  }
  IdxArray array;
  std::string shape;
  for (int i = 0; i < num_dims; ++i) {
    array.dims.push_back(BigEndian32(bytes.data() + kHeaderBytes + 4 * static_cast<size_t>(i)));
    shape += fmt::format("{}{}", i == 0 ? "" : " x ", array.dims.back());
  }
  const uint64_t expected = array.num_elements();
  const uint64_t got = bytes.size() - header;
  if (got != expected) {
    throw tandem::IoError(
        fmt::format("IDX file {}: the header promises {} = {} data bytes, the file holds {} ({})",
                    path, shape, expected, got, got < expected ? "truncated" : "trailing bytes"));
  }
  array.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return array;
}

}  // namespace fashion_mnist
