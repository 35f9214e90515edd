// A directory of one's own under $TMPDIR (or /tmp), removed with everything
// in it when the owner is destroyed: where the TLS tests and the transport
// benchmark put the key material they make at run time.
#pragma once

#include <filesystem>
#include <string>

namespace tandem::base {

/// Thread-safety: immutable after construction; the owner destroys it.
class TemporaryDirectory {
 public:
  /// Creates $TMPDIR/<prefix>XXXXXX (mode 0700). Throws IoError naming the
  /// path when it cannot.
  explicit TemporaryDirectory(const std::string& prefix = "tandem-");
  /// Removes the directory and its contents; errors are ignored.
  ~TemporaryDirectory();
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace tandem::base
