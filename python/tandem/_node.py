"""This process's node: its one membership in the job, shared by the
collectives (tandem.init()) and a distributed store
(tandem.kvstore.create("dist_sync")). Whichever comes first joins the job;
the other opens on the same node, with the same worker rank
(docs/python.md, "Both strategies in one process").

The node leaves the job when the last of them is closed: tandem.shutdown()
and KVStore.close() each give up their use, and the last one runs the final
barrier (raising its error there). A use whose opening failed gives the
node up without the barrier, as C++ does when a store's constructor throws."""

from __future__ import annotations

import threading

from tandem import _core

_lock = threading.RLock()
_cluster: "_core.Cluster | None" = None
_users = 0


def acquire() -> "_core.Cluster":
    """The joined node, joining the job on first use; counts one user, which
    must be given back with release()."""
    global _cluster, _users
    with _lock:
        if _cluster is None:
            _cluster = _core.Cluster()
        _users += 1
        return _cluster


def release(graceful: bool = True) -> None:
    """Gives back one use. The last one leaves the job: with the final
    barrier when `graceful` (raising tandem.PeerLost, tandem.Timeout as it
    fails), else at once."""
    global _cluster, _users
    with _lock:
        _users -= 1
        if _users > 0 or _cluster is None:
            return
        cluster, _cluster = _cluster, None
    if graceful:
        cluster.finalize()


def current() -> "_core.Cluster | None":
    """The joined node, or None when this process has not joined."""
    return _cluster


def joined() -> bool:
    """True while this process is a member of the job through this node."""
    return _cluster is not None


def record_span(track: str, name: str, start_ns: int, end_ns: int) -> None:
    """Adds a span to this process's timeline (TANDEM_TIMELINE; times from
    time.monotonic_ns()), on the thread track `track`: the program's own
    phases beside tandem's operations. Nothing without a timeline or when
    the process has not joined a job."""
    with _lock:
        cluster = _cluster
    if cluster is not None:
        cluster.record_span(track, name, int(start_ns), int(end_ns))


def workers() -> list[int]:
    """The ranks of the workers that are members now (an elastic job's fall
    as workers leave, docs/elastic.md); [] when not joined."""
    with _lock:
        return list(_cluster.workers) if _cluster is not None else []


def epoch() -> int:
    """How many times the membership changed (0 until a worker leaves an
    elastic job, and when not joined)."""
    with _lock:
        return _cluster.epoch if _cluster is not None else 0
