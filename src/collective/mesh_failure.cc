// A failed mesh's error: the tandem exception of each FailureKind, and the
// kind of the exception another component failed with.
#include "collective/mesh_failure.h"

#include <string>

#include "tandem/error.h"

namespace tandem::collective {

void MeshFailure::Throw(const std::string& prefix) const {
  switch (kind) {
    case FailureKind::kPeerLost:
      throw PeerLost(prefix + text);
    case FailureKind::kTimeout:
      throw Timeout(prefix + text);
    case FailureKind::kProtocol:
      throw ProtocolError(prefix + text);
    case FailureKind::kMismatch:
      throw CallMismatch(prefix + text);
    case FailureKind::kIo:
      throw IoError(prefix + text);
    case FailureKind::kInvalidArgument:
      throw InvalidArgument(prefix + text);
    case FailureKind::kConfig:
      throw ConfigError(prefix + text);
    case FailureKind::kOther:
      break;
  }
  throw Error(prefix + text);
}

FailureKind FailureKindOf(const std::exception_ptr& error) {
  if (!error) return FailureKind::kPeerLost;
  try {
    std::rethrow_exception(error);
  } catch (const PeerLost&) {
    return FailureKind::kPeerLost;
  } catch (const Timeout&) {
    return FailureKind::kTimeout;
  } catch (const ProtocolError&) {
    return FailureKind::kProtocol;
  } catch (const CallMismatch&) {
    return FailureKind::kMismatch;
  } catch (const IoError&) {
    return FailureKind::kIo;
  } catch (const InvalidArgument&) {
    return FailureKind::kInvalidArgument;
  } catch (const ConfigError&) {
    return FailureKind::kConfig;
  } catch (...) {
    return FailureKind::kOther;
  }
}

}  // namespace tandem::collective
