#include "base/temporary_directory.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "tandem/error.h"

namespace tandem::base {

TemporaryDirectory::TemporaryDirectory(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string pattern =
      fmt::format("{}/{}XXXXXX", base != nullptr && *base != '\0' ? base : "/tmp", prefix);
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw IoError(
        fmt::format("cannot create a temporary directory {}: {}", pattern, std::strerror(errno)));
  }
  path_ = pattern;
}

TemporaryDirectory::~TemporaryDirectory() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace tandem::base
