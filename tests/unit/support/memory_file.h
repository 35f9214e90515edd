// An in-memory file (memfd) that a launcher or supervisor under test writes
// its output to, read back by the test afterwards.
#pragma once

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tandem::testing {

/// Thread-safety: one thread reads; writers may be other processes.
class MemoryFile {
 public:
  /// Throws std::runtime_error when memfd_create fails.
  MemoryFile() : fd_(::memfd_create("test-output", MFD_CLOEXEC)) {
    if (fd_ < 0) throw std::runtime_error("memfd_create failed");
  }
  ~MemoryFile() { ::close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  /// The descriptor to write to (stays owned by this object).
  int fd() const { return fd_; }

  /// Everything written so far.
  std::string Text() const {
    struct stat st {};
    ::fstat(fd_, &st);
    std::string text(static_cast<size_t>(st.st_size), '\0');
    size_t done = 0;
    while (done < text.size()) {
      ssize_t n = ::pread(fd_, text.data() + done, text.size() - done, static_cast<off_t>(done));
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    text.resize(done);
    return text;
  }

  /// Text() split into lines, without their newlines.
  std::vector<std::string> Lines() const {
    std::vector<std::string> lines;
    std::istringstream in(Text());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

 private:
  int fd_;
};

}  // namespace tandem::testing
