"""Elastic training in Horovod Elastic's shape, over tandem's collectives
(docs/elastic.md, "The elastic API"):

    state = tandem.elastic.ObjectState(step=0, weights=w)

    @tandem.elastic.run
    def train(state):
        while state.step < steps:
            ...                                  # collectives of the step
            state.step += 1
            state.commit()                       # cheap: a copy in memory

    train(state)

When a worker leaves an elastic job (tandem launch --workers MIN:MAX) the
operation under way raises tandem.MembershipChanged on every remaining
worker; when workers wait to join, the next commit() raises it. run() then puts the state back to its last commit (restore()),
regroups the workers (tandem.regroup()), calls the reset callbacks and makes
every worker's state the lowest remaining worker's (sync()), and calls the
function again. Each worker loses at most what it did since its last
commit; the workers agree on the lowest one's commit.

Requires tandem.init(). tandem.torch.elastic.TorchState holds a model and
an optimizer the same way."""

from __future__ import annotations

import abc
import copy
import functools
import io
import pickle
from typing import Any, Callable, Iterable

import numpy as np

from tandem import _core
from tandem import collective as _coll


def broadcast_object(obj: Any, root_rank: int = 0) -> Any:
    """Returns root_rank's `obj` (pickled) on every rank of the world."""
    if _coll.rank() == root_rank:
        payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8).copy()
        length = np.array([payload.size], dtype=np.int64)
    else:
        payload = None
        length = np.zeros(1, dtype=np.int64)
    _coll.broadcast_(length, root_rank, name="elastic state length")
    if payload is None:
        payload = np.empty(int(length[0]), dtype=np.uint8)
    _coll.broadcast_(payload, root_rank, name="elastic state")
    if _coll.rank() == root_rank:
        return obj
    return pickle.load(io.BytesIO(payload.tobytes()))


class State(abc.ABC):
    """What a training function keeps across changes of the workers. A
    subclass defines save() (a copy of the state in memory), restore() (back
    to that copy) and sync() (every worker's state becomes rank 0's, the
    lowest remaining worker's after a regroup)."""

    def __init__(self) -> None:
        self._reset_callbacks: list[Callable[[], None]] = []

    def register_reset_callbacks(self, callbacks: Iterable[Callable[[], None]]) -> None:
        """Functions called after each regroup, before sync(): e.g. one that
        scales the learning rate by the new tandem.size() (the linear
        scaling rule) or re-shards the data by tandem.rank()."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        """Runs the reset callbacks, in the order registered."""
        for callback in self._reset_callbacks:
            callback()

    def commit(self) -> None:
        """Records the state as the one to go back to: call it after each
        step (or every few). A copy in memory; inside run(), also the check
        for workers waiting to join (tandem.check_joins(), one small
        broadcast), which raises tandem.MembershipChanged so that run()
        admits them. Every worker commits at the same points."""
        self.save()
        if getattr(self, "_in_run", False):
            _coll.check_joins()

    @abc.abstractmethod
    def save(self) -> None:
        """Copies the state in memory (what restore() goes back to)."""

    @abc.abstractmethod
    def restore(self) -> None:
        """Puts the state back to the last save()."""

    @abc.abstractmethod
    def sync(self) -> None:
        """Makes every worker's state rank 0's, then saves it."""


class ObjectState(State):
    """Keyword arguments as attributes (numbers, NumPy arrays, any picklable
    object): `state.step`, `state.weights`. save() deep-copies them,
    restore() puts the copies back, sync() broadcasts rank 0's."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self._names = list(kwargs)
        for name, value in kwargs.items():
            setattr(self, name, value)
        self._saved: dict[str, Any] = {}
        self.save()

    def save(self) -> None:
        self._saved = {name: copy.deepcopy(getattr(self, name)) for name in self._names}

    def restore(self) -> None:
        for name, value in self._saved.items():
            setattr(self, name, copy.deepcopy(value))

    def sync(self) -> None:
        values = broadcast_object({name: getattr(self, name) for name in self._names})
        for name, value in values.items():
            setattr(self, name, value)
        self.save()


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps `func(state, *args, **kwargs)`: syncs the state, calls func, and
    when it raises tandem.MembershipChanged, restores the state to its last
    commit, regroups (tandem.regroup()), calls the reset callbacks and
    starts again. Other errors (PeerLost when the job stayed below its
    minimum of workers past TANDEM_ELASTIC_TIMEOUT) pass through. Every remaining worker must be inside the wrapper."""

    @functools.wraps(func)
    def wrapper(state: State, *args: Any, **kwargs: Any) -> Any:
        # A change during the first sync (a worker left before they all
        # started) is handled as any other: _reset syncs again.
        synced = False
        state._in_run = True  # commit() checks for joining workers
        try:
            while True:
                try:
                    if not synced:
                        synced = True
                        state.sync()
                    return func(state, *args, **kwargs)
                except _core.MembershipChanged:
                    state.restore()
                    _reset(state)
        finally:
            state._in_run = False

    return wrapper


def _reset(state: State) -> None:
    # Another worker may leave while these regroup: again, until a regroup
    # and its sync pass.
    while True:
        try:
            _coll.regroup()
            state.on_reset()
            state.sync()
            return
        except _core.MembershipChanged:
            state.restore()
