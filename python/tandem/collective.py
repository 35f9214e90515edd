"""Collectives on NumPy arrays and torch tensors, in Horovod's style, over
include/tandem/collective.h (docs/collectives.md).

    tandem.init()                        # join the job; connect the workers
    total = tandem.allreduce(x)          # a new tensor
    tandem.allreduce_(x, op="avg")       # in place
    h = tandem.allreduce_async_(g)       # queued; h.wait() returns g

Every worker calls the same operations in the same order. Inputs are used
in place (no copies); the functions without a trailing underscore allocate
their output (one new tensor of the input's kind) and never copy the input.
Operations take `group=` (a communicator from new_group) and `name=` (named
in errors) and `timeout=` (seconds; 0 means TANDEM_COLLECTIVE_TIMEOUT).

The process's collectives are one object held by this module (the handle
of the job membership, as Horovod's hvd.init()); init() creates it and
shutdown() (also run at exit) leaves the job.
"""

from __future__ import annotations

import os
import threading
from typing import Optional, Sequence

from tandem import _core, _exit, _node
from tandem._tensors import empty_like, shape_of

Communicator = _core.Communicator

# The reductions, as Horovod names them (hvd.Sum, hvd.Average, ...); the
# strings themselves work too. tandem.allreduce sums by default, as
# torch.distributed.all_reduce does; tandem.torch.allreduce averages, as
# Horovod's does (docs/python.md, "Reductions").
Sum = "sum"
Average = "avg"
Min = "min"
Max = "max"
Product = "prod"

# Horovod's and torchrun's variables, for a process that no start-up
# contract places (horovodrun sets only HOROVOD_*; a DMLC job's worker).
_LOCAL_FALLBACK = (("LOCAL_RANK", "LOCAL_WORLD_SIZE"),
                   ("HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE"))


def _local_placement() -> tuple[int, int]:
    placement = _core.local_placement()
    if placement is not None:
        return placement[1], placement[2]
    for rank_name, size_name in _LOCAL_FALLBACK:
        if os.environ.get(rank_name):
            values = []
            for name, default in ((rank_name, 0), (size_name, 1)):
                text = os.environ.get(name) or str(default)
                try:
                    values.append(int(text))
                except ValueError:
                    raise _core.ConfigError(f"{name}={text!r} is not a whole number") from None
            return values[0], values[1]
    return 0, 1


def local_rank() -> int:
    """This worker's index among the workers on its host, as Horovod's
    hvd.local_rank(). Read as the C++ runtime reads it, from the first
    start-up contract of the environment (docs/contracts.md: tandem's
    TANDEM_LOCAL_RANK, Open MPI's, PMI's, Slurm's, torchrun's LOCAL_RANK,
    ...), else LOCAL_RANK, else HOROVOD_LOCAL_RANK; 0 when none is set (a
    process alone). Needs no init()."""
    return _local_placement()[0]


def local_size() -> int:
    """The number of workers on this host, as hvd.local_size(): from the same
    source as local_rank() (LOCAL_WORLD_SIZE, HOROVOD_LOCAL_SIZE, ...); 1
    when none is set."""
    return _local_placement()[1]


_lock = threading.Lock()
_state: dict[str, object] = {}  # "collectives": the joined _core.Collectives


def init() -> None:
    """Joins the job the environment describes as a worker (DMLC contract;
    `tandem launch -n N` with or without servers) and connects to every other
    worker. Idempotent. In a process that opened a distributed store first,
    the collectives open on the store's node, with the same rank. Raises
    tandem.ConfigError (not a worker), tandem.Timeout (names the workers
    that did not connect)."""
    with _lock:
        if "collectives" not in _state:
            cluster = _node.acquire()
            try:
                _state["collectives"] = _core.Collectives(cluster)
            except BaseException:
                _node.release(graceful=False)
                raise


def is_initialized() -> bool:
    return "collectives" in _state


def shutdown() -> None:
    """Waits for queued operations, closes the framework engine (when
    engine() made one) and leaves the job. Idempotent."""
    with _lock:
        e = _state.pop("engine", None)
        c = _state.pop("collectives", None)
        _state.pop("epoch", None)
    if e is not None:
        e.close()
    if c is not None:
        try:
            c.finalize()
        finally:
            _node.release()


def engine() -> "_core.FusionEngine":
    """The framework engine over every worker (docs/collectives.md,
    "Framework engine"), made on first use; every worker must call it.
    Its requests are named and may be made in any order on each rank: the
    ranks agree which are ready everywhere, run them in one order, fuse
    small allreduces, and report a tensor some ranks have not submitted
    after TANDEM_STALL_WARNING_SECONDS (10 s), naming it and the missing
    ranks. tandem.torch.DistributedOptimizer(negotiate=True) uses it."""
    c = _collectives()
    with _lock:
        if "engine" not in _state:
            _state["engine"] = _core.FusionEngine(c)
        return _state["engine"]


def _collectives() -> "_core.Collectives":
    c = _state.get("collectives")
    if c is None:
        raise _core.InvalidArgument("tandem collectives are not initialised: call tandem.init()")
    return c


def _comm(group: Optional[Communicator]) -> Communicator:
    return group if group is not None else _collectives().world()


def rank(group: Optional[Communicator] = None) -> int:
    """This process's rank in `group` (default: the world = worker rank)."""
    return _comm(group).rank


def size(group: Optional[Communicator] = None) -> int:
    """The number of ranks in `group` (default: every worker)."""
    return _comm(group).size


def regroup() -> tuple[int, list[int]]:
    """Elastic jobs (TANDEM_MIN_WORKERS, docs/elastic.md "Elastic
    collectives"): after an operation raised tandem.MembershipChanged, every
    remaining worker calls this. It waits at a barrier of the workers that
    are members and, after a change, makes the world again over them on the
    connections already open: rank() and size() change (the workers keep
    their order). Groups from new_group and the framework engine made
    before the change are retired; make them again (engine() does so on its
    next call). Without a change it is a barrier. Returns the barrier's
    answer: (membership epoch, the members' worker ranks)."""
    c = _collectives()
    epoch, workers = c.regroup()
    engine_made = None
    with _lock:
        if _state.get("epoch", 0) != epoch:
            _state["epoch"] = epoch
            engine_made = _state.pop("engine", None)
    if engine_made is not None:
        engine_made.close()  # its operations were abandoned with the change
    return int(epoch), [int(w) for w in workers]


def check_joins() -> None:
    """Elastic jobs (docs/elastic.md, "Workers that join"): raises
    tandem.MembershipChanged when workers wait to join the running job (as
    rank 0 of the world knows it; one 8-byte broadcast), so that the workers
    regroup and the scheduler admits them. Every member calls it at the same
    point; tandem.elastic's commit() does inside run(). Does nothing in a job
    that is not elastic."""
    _collectives().check_joins()


def joined_running_job() -> bool:
    """Elastic jobs (docs/elastic.md, "Workers that join"): whether this
    worker was admitted into the running job in a departed worker's place,
    so that its state comes from the others (tandem.elastic.run's first
    sync() gives it), rather than one that started with the job."""
    _collectives()  # initialised
    cluster = _node.current()
    return bool(cluster is not None and cluster.joined_running_job)


def new_group(world_ranks: Sequence[int]) -> Communicator:
    """A communicator over the workers `world_ranks` (group rank i is
    world_ranks[i]). Only members call it, in the same order everywhere."""
    return _collectives().new_group([int(r) for r in world_ranks])


class Handle:
    """A queued collective. wait() blocks (GIL released), raises the
    operation's error and returns its result tensor; done() never blocks.
    The tensors stay referenced until the operation finished."""

    def __init__(self, core_handle, result, finish=None):
        self._handle = core_handle
        self._result = result
        self._finish = finish

    def wait(self):
        self._handle.wait()
        if self._finish is not None:
            self._result = self._finish(self._result)
            self._finish = None
        return self._result

    def done(self) -> bool:
        return self._handle.done()


# -- allreduce --


def allreduce_async(tensor, op: str = "sum", out=None, *, prescale: float = 1.0,
                    postscale: float = 1.0, algorithm: str = "auto", name: str = "",
                    timeout: float = 0.0, group: Optional[Communicator] = None) -> Handle:
    """Queues out = op over every rank's `tensor` (op: Sum, Average, Min,
    Max, Product, or their strings sum, avg or average, min, max, prod);
    `out` defaults to a new tensor like `tensor`; out may be tensor (in
    place). prescale/postscale multiply input/result (floating point)."""
    if out is None:
        out = empty_like(tensor, shape_of(tensor))
    h = _comm(group).allreduce_async(tensor, out, op, prescale, postscale, algorithm, name,
                                     timeout)
    return Handle(h, out)


def allreduce_async_(tensor, op: str = "sum", **kwargs) -> Handle:
    """allreduce_async in place."""
    return allreduce_async(tensor, op, out=tensor, **kwargs)


def allreduce(tensor, op: str = "sum", out=None, **kwargs):
    """The blocking allreduce_async; returns the result."""
    return allreduce_async(tensor, op, out, **kwargs).wait()


def allreduce_(tensor, op: str = "sum", **kwargs):
    """allreduce in place; returns tensor."""
    return allreduce_async(tensor, op, out=tensor, **kwargs).wait()


# -- broadcast --


def broadcast_async_(tensor, root_rank: int, *, name: str = "", timeout: float = 0.0,
                     group: Optional[Communicator] = None) -> Handle:
    """Queues the copy of root_rank's `tensor` into `tensor` on every rank."""
    return Handle(_comm(group).broadcast_async(tensor, int(root_rank), name, timeout), tensor)


def broadcast_(tensor, root_rank: int, **kwargs):
    """Blocking broadcast in place; returns tensor."""
    return broadcast_async_(tensor, root_rank, **kwargs).wait()


def broadcast(tensor, root_rank: int, **kwargs):
    """Returns a new tensor holding root_rank's `tensor` (the input is
    copied into it first on every rank: the one copy of this function)."""
    from tandem._tensors import copy_of
    return broadcast_(copy_of(tensor), root_rank, **kwargs)


# -- allgather --


def allgather_async(tensor, out=None, *, name: str = "", timeout: float = 0.0,
                    group: Optional[Communicator] = None) -> Handle:
    """Queues the concatenation of every rank's `tensor` along dimension 0
    (a 0-d tensor counts as one row), in rank order. Ranks may differ in
    their first dimension only; their sizes are all-gathered first when
    `out` is not given (one small extra operation)."""
    comm = _comm(group)
    shape = shape_of(tensor)
    rows, rest = (shape[0], shape[1:]) if shape else (1, ())
    per_row = 1
    for d in rest:
        per_row *= d
    if out is None:
        import numpy
        mine = numpy.array([rows], dtype=numpy.int64)
        counts = numpy.empty(comm.size, dtype=numpy.int64)
        comm.allgather_async(mine, counts, name + ":rows" if name else "allgather rows",
                             timeout).wait()
        all_rows = [int(c) for c in counts]
        out = empty_like(tensor, (sum(all_rows),) + rest)
    else:
        all_rows = None
    if all_rows is None or len(set(all_rows)) == 1:
        h = comm.allgather_async(tensor, out, name, timeout)
    else:
        h = comm.allgatherv_async(tensor, out, [r * per_row for r in all_rows], name, timeout)
    return Handle(h, out)


def allgather(tensor, out=None, **kwargs):
    """The blocking allgather_async; returns the result."""
    return allgather_async(tensor, out, **kwargs).wait()


# -- reduce_scatter, alltoall --


def _block_shape(tensor, n: int, what: str) -> tuple[int, ...]:
    shape = shape_of(tensor)
    if not shape or shape[0] % n != 0:
        raise _core.InvalidArgument(
            f"{what}: the first dimension of shape {list(shape)} must split into {n} equal "
            f"blocks (one per rank)")
    return (shape[0] // n,) + shape[1:]


def reduce_scatter_async(tensor, op: str = "sum", out=None, *, prescale: float = 1.0,
                         postscale: float = 1.0, name: str = "", timeout: float = 0.0,
                         group: Optional[Communicator] = None) -> Handle:
    """Queues: `tensor` is size() equal blocks along dimension 0; rank r
    receives op over every rank's block r (shape (rows/size, *rest))."""
    comm = _comm(group)
    if out is None:
        out = empty_like(tensor, _block_shape(tensor, comm.size, "reduce_scatter"))
    h = comm.reduce_scatter_async(tensor, out, op, prescale, postscale, name, timeout)
    return Handle(h, out)


def reduce_scatter(tensor, op: str = "sum", out=None, **kwargs):
    """The blocking reduce_scatter_async; returns the result."""
    return reduce_scatter_async(tensor, op, out, **kwargs).wait()


def alltoall_async(tensor, out=None, *, name: str = "", timeout: float = 0.0,
                   group: Optional[Communicator] = None) -> Handle:
    """Queues: block j (of size() equal blocks along dimension 0) of
    `tensor` goes to rank j, where it lands in block rank() of the result."""
    comm = _comm(group)
    if out is None:
        _block_shape(tensor, comm.size, "alltoall")
        out = empty_like(tensor, shape_of(tensor))
    return Handle(comm.alltoall_async(tensor, out, name, timeout), out)


def alltoall(tensor, out=None, **kwargs):
    """The blocking alltoall_async; returns the result."""
    return alltoall_async(tensor, out, **kwargs).wait()


def barrier(*, name: str = "", timeout: float = 0.0,
            group: Optional[Communicator] = None) -> None:
    """Returns once every member entered the barrier."""
    _comm(group).barrier_async(name, timeout).wait()


_exit.leave_at_exit(shutdown)
