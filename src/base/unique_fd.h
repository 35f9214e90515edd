// Ownership of one POSIX file descriptor.
#pragma once

#include <unistd.h>

#include <utility>

namespace tandem::base {

/// Closes the descriptor it owns when destroyed. Move-only.
/// Thread-safety: like an int; the owner's thread.
class UniqueFd {
 public:
  UniqueFd() = default;
  /// Takes ownership of `fd` (-1 for none).
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  /// The descriptor, or -1.
  int get() const { return fd_; }
  /// True when a descriptor is owned.
  explicit operator bool() const { return fd_ >= 0; }
  /// Gives up ownership without closing.
  int Release() { return std::exchange(fd_, -1); }
  /// Closes the current descriptor (if any) and owns `fd` instead.
  void Reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace tandem::base
