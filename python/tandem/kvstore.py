"""MXNet's KVStore interface (mxnet.kvstore) over tandem's C++ store
(include/tandem/kvstore.h, docs/kvstore.md).

    kv = tandem.kvstore.create("dist_sync")
    kv.init(3, w)                  # every worker; worker 0's value is kept
    kv.push(3, g)                  # one round: the sum over the workers
    kv.pull(3, out=w)              # w receives the value after that round

Values are NumPy arrays or torch CPU tensors, used in place (no copies).
A key is an int or a str; a call takes one key, or a list of keys with a
list of values (one per key, each a tensor or a list of per-device
tensors). The plain methods block until the call completed (MXNet's were
asynchronous through its engine); the *_async ones return a Handle that
keeps its tensors referenced until it is waited for.
"""

from __future__ import annotations

import operator

from typing import Any, Sequence

from tandem import _core, _exit, _node

Handle = _core.KVHandle

# This process's distributed stores, held until they leave the job: by
# close() or at interpreter exit. A store that Python drops unclosed stays a
# member until then, so that the error of its final barrier (a peer lost
# meanwhile) ends the process with its code (tandem/_exit.py) instead of
# being logged by a destructor.
_MEMBERS: "list[_core.KVStore]" = []


def create(name: str = "local") -> "KVStore":
    """Creates a store: 'local' (this process), 'dist_sync' or 'dist_async'
    (a worker of a job started by `tandem launch -s S ...`; joins it),
    'device' and the '_device' forms (the same as their plain forms).
    Raises tandem.InvalidArgument (unknown type, not a worker),
    tandem.ConfigError, and what joining the job raises."""
    return KVStore(name)


def _pairs(key, value, what: str) -> list[tuple[Any, Any]]:
    if isinstance(key, (list, tuple)):
        if not isinstance(value, (list, tuple)) or len(value) != len(key):
            raise _core.InvalidArgument(
                f"{what}: {len(key)} keys need a list of {len(key)} values, got "
                f"{len(value) if isinstance(value, (list, tuple)) else type(value).__name__}")
        return list(zip(key, value))
    return [(key, value)]


class KVStore:
    """A key-value store for parameters (mxnet.kvstore.KVStore's methods).

    Thread-safety: as the C++ store; calls are expected from one training
    thread. Every blocking call releases the GIL.
    """

    def __init__(self, name: str = "local"):
        if not name.startswith("dist"):
            self._store = _core.KVStore(name)
            return
        # On the process's node, which tandem.init() may have joined already.
        cluster = _node.acquire()
        try:
            self._store = _core.KVStore(name, cluster)
        except BaseException:
            _node.release(graceful=False)
            raise
        _MEMBERS.append(self._store)

    # -- properties --

    @property
    def type(self) -> str:
        """The type the store was created with."""
        return self._store.type

    @property
    def rank(self) -> int:
        """This worker's rank (0 for a local store)."""
        return self._store.rank

    @property
    def num_workers(self) -> int:
        """Workers in the job (1 for a local store); in an elastic job, those
        that are members now (docs/elastic.md)."""
        return self._store.num_workers

    @property
    def workers(self) -> list[int]:
        """The ranks of the workers that are members now: [0, .., n-1] until
        a worker leaves an elastic job (docs/elastic.md), which the others
        go on without, keeping their ranks. [0] for a local store, [] once
        a distributed store is closed."""
        if self._store not in _MEMBERS:
            return [0] if not self.type.startswith("dist") else []
        return _node.workers()

    @property
    def epoch(self) -> int:
        """How many workers have left this elastic job (0 otherwise)."""
        return _node.epoch() if self._store in _MEMBERS else 0

    @property
    def num_servers(self) -> int:
        """Servers in the job (0 for a local store)."""
        return self._store.num_servers

    # -- data --

    def init(self, key, value) -> None:
        """Initialises key(s) with value(s). Every worker calls it with the
        same keys, shapes and dtypes; worker 0's values are kept. Raises
        tandem.InvalidArgument (double init, mixed key kinds, bad tensor)."""
        for k, v in _pairs(key, value, "init"):
            self._store.init(k, v)

    def push_async(self, key, value, priority: int = 0) -> list[Handle]:
        """Starts push(); returns one Handle per key."""
        return [self._store.push_async(k, v, priority) for k, v in _pairs(key, value, "push")]

    def push(self, key, value, priority: int = 0) -> None:
        """Pushes value(s) to key(s); a list of tensors for one key is one
        value per device, summed first. Blocks until the round (dist_sync)
        or the update (dist_async) is applied. Raises tandem.InvalidArgument
        (unknown key, shape or dtype mismatch) with the C++ message."""
        for h in self.push_async(key, value, priority):
            h.wait()

    def pull_async(self, key, out=None, priority: int = 0, ignore_sparse: bool = True
                   ) -> list[Handle]:
        """Starts pull(); returns one Handle per key."""
        del ignore_sparse  # tandem's values are dense
        if out is None:
            raise _core.InvalidArgument("pull: out is required (the tensors to write)")
        return [self._store.pull_async(k, o, priority) for k, o in _pairs(key, out, "pull")]

    def pull(self, key, out=None, priority: int = 0, ignore_sparse: bool = True) -> None:
        """Pulls key(s) into out (a tensor, or a list of per-device tensors,
        per key). A pull after this worker's push of the key sees that
        push's round. Blocks."""
        for h in self.pull_async(key, out, priority, ignore_sparse):
            h.wait()

    def pushpull_async(self, key, value, out=None, priority: int = 0) -> list[Handle]:
        """Starts pushpull(); returns one Handle per key."""
        if out is None:
            out = value
        outs = dict(enumerate(o for _, o in _pairs(key, out, "pushpull")))
        return [self._store.pushpull_async(k, v, outs[i], priority)
                for i, (k, v) in enumerate(_pairs(key, value, "pushpull"))]

    def pushpull(self, key, value, out=None, priority: int = 0) -> None:
        """Push then pull in one round trip; out (default: value itself)
        receives the value after this push's round. Blocks."""
        for h in self.pushpull_async(key, value, out, priority):
            h.wait()

    def broadcast(self, key, value, out, priority: int = 0) -> None:
        """init(key, value) then pull(key, out): every worker ends with
        worker 0's value."""
        self.init(key, value)
        self.pull(key, out=out, priority=priority)

    def row_sparse_pull(self, key, out=None, priority: int = 0, row_ids=None) -> None:
        """Pulls only rows `row_ids` (strictly ascending ints, or an int
        array) of a key whose first dimension is rows into out, of shape
        (len(row_ids), *rest). Only those rows travel. For a list of keys,
        out and row_ids are lists too. Blocks."""
        if out is None or row_ids is None:
            raise _core.InvalidArgument("row_sparse_pull: out and row_ids are required")
        keys = key if isinstance(key, (list, tuple)) else [key]
        outs = out if isinstance(key, (list, tuple)) else [out]
        ids = row_ids if isinstance(key, (list, tuple)) else [row_ids]
        handles = [self._store.row_sparse_pull_async(k, o, _row_list(r), priority)
                   for k, o, r in zip(keys, outs, ids)]
        for h in handles:
            h.wait()

    def row_sparse_push(self, key, rows, row_ids, priority: int = 0) -> None:
        """Pushes only rows `row_ids` (strictly ascending) of key: rows has
        shape (len(row_ids), *rest); rows not named count as zero. Blocks."""
        self._store.row_sparse_push_async(key, rows, _row_list(row_ids), priority).wait()

    # -- optimizer, compression, states --

    def set_optimizer(self, optimizer, **params) -> None:
        """Sets the optimizer the store applies to pushed gradients:
        set_optimizer("sgd", learning_rate=0.1, momentum=0.9), or a
        (name, dict) pair. Names and parameters are MXNet's (sgd, nag, adam,
        adagrad, rmsprop; docs/optimizers.md). Every worker calls it."""
        if isinstance(optimizer, tuple):
            optimizer, extra = optimizer
            params = {**extra, **params}
        self._store.set_optimizer(str(optimizer), dict(params))

    def set_gradient_compression(self, compression_params: dict) -> None:
        """MXNet's gradient compression: {"type": "2bit"|"1bit"|"none",
        "threshold": 0.5}. Before the first init, on every worker."""
        self._store.set_gradient_compression(dict(compression_params))

    def save_optimizer_states(self, fname: str, dump_optimizer: bool = False) -> None:
        """Saves the optimizer's states (distributed: every server writes
        <fname>.server<rank> on its own file system). Every worker calls it."""
        del dump_optimizer  # the optimizer's settings are not saved; set them again
        self._store.save_optimizer_states(str(fname))

    def load_optimizer_states(self, fname: str) -> None:
        """Loads what save_optimizer_states wrote, with the same optimizer set."""
        self._store.load_optimizer_states(str(fname))

    def save_checkpoint(self, directory: str, user_state: bytes = b"") -> int:
        """A consistent checkpoint of the whole store in `directory` (every
        server's keys, values and optimizer states; this worker's
        `user_state`), as round R, which it returns. Every worker calls it at
        the same point, after waiting for its pushes. docs/checkpoints.md."""
        return self._store.save_checkpoint(str(directory), bytes(user_state))

    def load_checkpoint(self, directory: str):
        """Loads the newest consistent round of `directory` (a damaged one is
        refused and the previous used); returns (round, this worker's
        user_state), or None when there is none. Every worker calls it after
        init of every key and set_optimizer."""
        return self._store.load_checkpoint(str(directory))

    def barrier(self) -> tuple[int, list[int]]:
        """Blocks until every worker called barrier(). Returns (epoch,
        workers): the membership epoch and the ranks of the workers that were
        members when the barrier was released, the same on every worker that
        passed it. An elastic program re-shards by it (docs/elastic.md);
        MXNet's barrier returned nothing, and a caller may ignore it."""
        return self._store.barrier()

    _barrier = barrier  # MXNet's spelling

    # -- life --

    def close(self) -> None:
        """Leaves the job (a distributed store meets the other workers in a
        barrier). Idempotent; also run at interpreter exit. Raises
        tandem.PeerLost, tandem.Timeout when that barrier fails."""
        if self._store not in _MEMBERS:
            self._store.close()  # a local store, or closed already
            return
        _MEMBERS.remove(self._store)
        try:
            self._store.close()
        finally:
            _node.release()

    def __enter__(self) -> "KVStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._store.closed:
            return "<tandem.kvstore.KVStore closed>"
        return (f"<tandem.kvstore.KVStore {self.type} rank={self.rank} "
                f"workers={self.num_workers} servers={self.num_servers}>")


_MAX_ROW_ID = 2**63 - 1


def _row_list(row_ids) -> list[int]:
    """Row ids as ints in 0..2**63-1; anything else (a float, a huge int)
    raises tandem.InvalidArgument naming it before anything is sent."""
    if hasattr(row_ids, "tolist"):
        row_ids = row_ids.tolist()
    rows = []
    for r in row_ids:
        try:
            i = operator.index(r)
        except TypeError:
            raise _core.InvalidArgument(f"row id {r!r} is not an integer") from None
        if not 0 <= i <= _MAX_ROW_ID:
            raise _core.InvalidArgument(f"row id {i} is outside 0..{_MAX_ROW_ID}")
        rows.append(i)
    return rows


def _close_all() -> None:
    while _MEMBERS:
        store = _MEMBERS.pop()
        try:
            store.close()
        finally:
            _node.release()


_exit.leave_at_exit(_close_all)
