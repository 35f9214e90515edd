// The exceptions tandem throws at its API.
//
// Every error message names what was wrong: the rank or node, the peer
// address, the key, the sizes expected and got. Callers catch the specific
// type when they can act on it (a PeerLost ends a job; a Timeout may be
// retried) and tandem::Error for everything else.
#pragma once

#include <stdexcept>
#include <string>

namespace tandem {

/// Base of every exception tandem throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A caller passed a value that cannot be used (bad shape, unknown key, bad
/// option). Nothing was changed.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// The process environment or a configuration value is unusable (an
/// unparsable variable, a missing scheduler address).
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// A wait ran out of time. The message says what was awaited and from whom.
class Timeout : public Error {
 public:
  using Error::Error;
};

/// A node of the job died or became unreachable. The message names it.
class PeerLost : public Error {
 public:
  using Error::Error;
};

/// A worker left an elastic job (TANDEM_MIN_WORKERS) while this
/// communicator's operation ran or before it began: the operation is
/// abandoned, and so is every later one of a communicator made before the
/// change. The message names the worker, why it left and the membership
/// epoch. Collectives::Regroup() makes the world again over the workers
/// that remain (docs/elastic.md, "Elastic collectives"). A PeerLost, so
/// that code written for a fixed world still ends (exit code 200).
class MembershipChanged : public PeerLost {
 public:
  using PeerLost::PeerLost;
};

/// A peer failed the authentication handshake (wrong secret or job id).
class AuthFailed : public Error {
 public:
  using Error::Error;
};

/// A peer sent bytes that break the wire protocol (bad magic, version,
/// checksum, a length above its limit, an unknown message type).
class ProtocolError : public Error {
 public:
  using Error::Error;
};

/// The members of a communicator made different collective calls (another
/// operation, tensor name, dtype, shape, reduction, root, group or
/// settings) at the same point, or called their communicators in orders
/// that cannot complete. Raised on every member; the message lists each
/// rank's call (docs/collectives.md "Call checks"). The process's
/// collectives are unusable afterwards, except after the framework
/// engine's, which fails only the one tensor.
class CallMismatch : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

/// An operating-system call failed (socket, file, process). The message
/// carries the call, its target and errno's text.
class IoError : public Error {
 public:
  using Error::Error;
};

/// The exit code a process should end with when `error` ended it, as
/// tandem's own processes do (docs/deploy.md, "Exit codes and restarts"):
/// 200 PeerLost, 201 Timeout, 202 IoError (retryable: `tandem launch
/// --max-restarts` and Kubernetes restart the job), 76 ProtocolError, 77
/// AuthFailed, 78 ConfigError and InvalidArgument, 1 anything else
/// (permanent). A training program's `catch` returns it from main(). Any
/// thread; never throws.
int ExitCodeFor(const std::exception& error) noexcept;

}  // namespace tandem
