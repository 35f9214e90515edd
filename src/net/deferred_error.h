// An error handed from a transport's thread to a caller waiting on another
// thread (Connect, Listen).
//
// Passing the std::exception_ptr itself would share one exception object
// between two threads, whose lifetime is then ordered only by the C++
// runtime's internal reference count (invisible to ThreadSanitizer). A
// DeferredError keeps the tandem exception type and the message instead, and
// the waiting thread throws a fresh exception built from them.
#pragma once

#include <exception>
#include <string>

namespace tandem::net {

/// Thread-safety: a value type; made on one thread, thrown on another.
class DeferredError {
 public:
  /// No error.
  DeferredError() = default;

  /// Records the type (one of tandem's error classes; anything else becomes
  /// tandem::Error) and the message of `error`. Never throws except
  /// std::bad_alloc.
  static DeferredError From(std::exception_ptr error);

  /// True when an error was recorded.
  explicit operator bool() const { return kind_ != Kind::kNone; }

  /// Throws a new exception of the recorded type and message; does nothing
  /// when no error was recorded.
  void ThrowIfSet() const;

 private:
  enum class Kind {
    kNone,
    kError,
    kInvalidArgument,
    kTimeout,
    kPeerLost,
    kAuthFailed,
    kProtocolError,
    kIoError
  };
  Kind kind_ = Kind::kNone;
  std::string message_;
};

}  // namespace tandem::net
