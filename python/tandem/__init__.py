"""tandem for Python: the parameter server (tandem.kvstore) and the
collectives (tandem.allreduce, ...) of the C++ runtime, on NumPy arrays and
torch tensors without copies. docs/python.md describes the package.

    import tandem
    kv = tandem.kvstore.create("dist_sync")      # a worker of a `tandem launch` job
    kv.init(3, weight); kv.push(3, grad); kv.pull(3, out=weight)

    tandem.init()                                # collectives: join the workers' mesh
    tandem.allreduce_(grad, op=tandem.Average)   # in place (the default op sums)

tandem.torch (imported on its own: `import tandem.torch`) holds the PyTorch
integration (DistributedOptimizer, broadcast_parameters, ...).
"""

from tandem import _core
from tandem._core import (AuthFailed, CallMismatch, ConfigError, Error, InvalidArgument, IoError,
                          MembershipChanged, PeerLost, ProtocolError, Timeout)
from tandem import kvstore
from tandem import elastic
from tandem.collective import (Average, Handle, Max, Min, Product, Sum, allgather,
                               allgather_async, allreduce, allreduce_, allreduce_async,
                               allreduce_async_, alltoall, alltoall_async, barrier, broadcast,
                               broadcast_, broadcast_async_, check_joins, engine, init,
                               is_initialized, joined_running_job,
                               local_rank, local_size, new_group, rank, reduce_scatter, regroup,
                               reduce_scatter_async, shutdown, size)
from tandem import _exit
from tandem._exit import exit_code_for
from tandem._node import record_span

__version__ = _core.__version__  # the C++ runtime's version, as `tandem version` prints

# After kvstore and collective: its atexit handler must run before theirs.
_exit.install()

__all__ = [
    "Average", "Max", "Min", "Product", "Sum", "__version__", "local_rank", "local_size",
    "AuthFailed", "CallMismatch", "ConfigError", "Error", "InvalidArgument", "IoError", "MembershipChanged",
    "PeerLost",
    "ProtocolError", "Timeout", "elastic", "kvstore", "Handle", "allgather", "allgather_async",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "alltoall",
    "alltoall_async", "barrier", "broadcast", "broadcast_", "broadcast_async_", "check_joins",
    "engine",
    "exit_code_for", "init", "joined_running_job",
    "is_initialized", "new_group", "rank", "record_span", "reduce_scatter", "reduce_scatter_async", "regroup",
    "shutdown",
    "size",
]
