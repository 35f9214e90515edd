#include "net/deferred_error.h"

#include "tandem/error.h"

namespace tandem::net {

DeferredError DeferredError::From(std::exception_ptr error) {
  DeferredError d;
  if (!error) return d;
  try {
    std::rethrow_exception(error);
  } catch (const InvalidArgument& e) {
    d.kind_ = Kind::kInvalidArgument;
    d.message_ = e.what();
  } catch (const Timeout& e) {
    d.kind_ = Kind::kTimeout;
    d.message_ = e.what();
  } catch (const PeerLost& e) {
    d.kind_ = Kind::kPeerLost;
    d.message_ = e.what();
  } catch (const AuthFailed& e) {
    d.kind_ = Kind::kAuthFailed;
    d.message_ = e.what();
  } catch (const ProtocolError& e) {
    d.kind_ = Kind::kProtocolError;
    d.message_ = e.what();
  } catch (const IoError& e) {
    d.kind_ = Kind::kIoError;
    d.message_ = e.what();
  } catch (const std::exception& e) {
    d.kind_ = Kind::kError;
    d.message_ = e.what();
  } catch (...) {
    d.kind_ = Kind::kError;
    d.message_ = "unknown error";
  }
  return d;
}

void DeferredError::ThrowIfSet() const {
  switch (kind_) {
    case Kind::kNone:
      return;
    case Kind::kError:
      throw Error(message_);
    case Kind::kInvalidArgument:
      throw InvalidArgument(message_);
    case Kind::kTimeout:
      throw Timeout(message_);
    case Kind::kPeerLost:
      throw PeerLost(message_);
    case Kind::kAuthFailed:
      throw AuthFailed(message_);
    case Kind::kProtocolError:
      throw ProtocolError(message_);
    case Kind::kIoError:
      throw IoError(message_);
  }
}

}  // namespace tandem::net
