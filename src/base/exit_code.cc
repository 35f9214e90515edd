#include "base/exit_code.h"

#include <array>

#include "tandem/error.h"

namespace tandem::base {

int ExitCodeFor(const std::exception& error) noexcept {
  if (dynamic_cast<const PeerLost*>(&error) != nullptr) return kExitPeerLost;
  if (dynamic_cast<const Timeout*>(&error) != nullptr) return kExitTimeout;
  if (dynamic_cast<const IoError*>(&error) != nullptr) return kExitIoError;
  if (dynamic_cast<const AuthFailed*>(&error) != nullptr) return kExitAuthFailed;
  if (dynamic_cast<const ProtocolError*>(&error) != nullptr) return kExitProtocolError;
  if (dynamic_cast<const ConfigError*>(&error) != nullptr) return kExitConfigError;
  if (dynamic_cast<const InvalidArgument*>(&error) != nullptr) return kExitConfigError;
  return kExitError;
}

bool IsRetryableExitCode(int code) noexcept { return code >= 128 && code <= 255; }

std::span<const int> PermanentExitCodes() noexcept {
  static constexpr std::array<int, 7> kCodes = {
      kExitError,       kExitUsage,         kExitProtocolError, kExitAuthFailed,
      kExitConfigError, kExitCannotExecute, kExitNotFound};
  return kCodes;
}

}  // namespace tandem::base

namespace tandem {

int ExitCodeFor(const std::exception& error) noexcept { return base::ExitCodeFor(error); }

}  // namespace tandem
