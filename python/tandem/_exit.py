"""Exit codes of a Python program that tandem's errors end
(docs/deploy.md, "Exit codes and restarts"; the table's source is
src/base/exit_code.h).

An uncaught exception normally ends Python with 1 after its atexit handlers
ran, and tandem's handlers leave the job politely: a final barrier with the
other processes. Both are wrong for a failed worker: 1 is permanent, so
`tandem launch --max-restarts` and Kubernetes' podFailurePolicy would not
restart the job after a lost peer, and the final barrier can wait for
workers that are themselves blocked waiting for this one. So, once an
exception escapes: the traceback is printed as usual, the atexit handlers
registered after `import tandem` run, and then the process ends at once,
without the final barrier (the other processes learn it left), with the
code of the exception: 200 PeerLost, 201 Timeout, 202 IoError, 76
ProtocolError, 77 AuthFailed, 78 ConfigError and InvalidArgument, 130 for
Ctrl-C, 1 for anything else.

A program that ends normally leaves the job in its atexit handlers (the
final barrier of tandem.shutdown() and KVStore.close()). Python would print
an error raised there as "Exception ignored" and keep the program's code, 0
for a worker whose peer was killed while it waited in that barrier; those
handlers are registered through leave_at_exit, which ends the process with
the error's code instead when the job failed there: a retryable code (200
PeerLost, 201 Timeout, 202 IoError). Another error there is the replay of
one the program already caught (a CallMismatch the communicator keeps): it
is printed and the program's own code stays."""

from __future__ import annotations

import atexit
import os
import sys
import traceback
from typing import Callable

from tandem import _core

# Most derived first: CallMismatch is an InvalidArgument, every one an Error.
_CODES = (
    (_core.PeerLost, 200),
    (_core.Timeout, 201),
    (_core.IoError, 202),
    (_core.AuthFailed, 77),
    (_core.ProtocolError, 76),
    (_core.ConfigError, 78),
    (_core.InvalidArgument, 78),
)

# The retryable codes (tandem::IsRetryableExitCode): a job that failed.
_JOB_FAILED = (200, 201, 202)

_pending: list[int] = []


def exit_code_for(error: BaseException) -> int:
    """The exit code a process ended by `error` should return (the table
    above; tandem::ExitCodeFor in C++)."""
    if isinstance(error, KeyboardInterrupt):
        return 130
    for kind, code in _CODES:
        if isinstance(error, kind):
            return code
    return 1


def _excepthook(kind, error, traceback) -> None:
    _previous_hook(kind, error, traceback)
    _pending[:] = [exit_code_for(error)]


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed stream: nothing left to lose
            pass


def _exit_now() -> None:
    if not _pending:
        return
    _flush()
    os._exit(_pending[0])


def leave_at_exit(leave: Callable[[], None]) -> None:
    """Registers `leave` (a module's way of leaving the job) to run at
    interpreter exit. An error it raises is printed with its traceback; one
    with a retryable code (200 for a peer lost in the final barrier, where
    Python would keep the program's 0) then ends the process at once with
    that code."""

    def run() -> None:
        try:
            leave()
        except Exception as error:
            code = exit_code_for(error)
            kept = "" if code in _JOB_FAILED else " (the program's exit code is kept)"
            sys.stderr.write(f"tandem: leaving the job at exit failed{kept}:\n")
            traceback.print_exception(type(error), error, error.__traceback__)
            _flush()
            if code in _JOB_FAILED:
                os._exit(code)

    atexit.register(run)


def install() -> None:
    """Hooks the interpreter's exit. Call after the modules whose atexit
    handlers leave the job were imported, so that this one runs before them."""
    global _previous_hook
    if sys.excepthook is not _excepthook:
        _previous_hook = sys.excepthook
        sys.excepthook = _excepthook
    atexit.unregister(_exit_now)
    atexit.register(_exit_now)


_previous_hook = sys.excepthook
