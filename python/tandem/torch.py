"""PyTorch integration: data-parallel training with tandem, in Horovod's
style (collectives) or through the parameter server (KVStore).

    import tandem, tandem.torch as tt
    tandem.init()
    opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  named_parameters=model.named_parameters())
    tt.broadcast_parameters(model.state_dict(), root_rank=0)
    tt.broadcast_optimizer_state(opt, root_rank=0)
    ... loss.backward(); opt.step()

DistributedOptimizer registers a hook on every parameter's gradient
accumulator: as soon as backward() has produced a parameter's gradient, an
asynchronous in-place allreduce (avg) of it is queued, so communication of
the last layers overlaps the backward computation of the first ones.
step() waits for them (synchronize()) and then runs the wrapped optimizer.
tandem has no order negotiation: every rank must produce its gradients in
the same order, which holds when every rank runs the same model code (one
autograd graph shape); a parameter whose hook did not fire is reduced in
step(), in name order.

KVStoreOptimizer is the parameter-server variant: gradients are pushed to
the servers during backward and the weights (or summed gradients) pulled
back. docs/python.md describes both.
"""

from __future__ import annotations

import io
import queue
import threading
import time
from typing import Iterable, Optional

import numpy as np
import torch

from tandem import _c10d_backend
from tandem import _compression
from tandem import _core
from tandem import _node
from tandem import collective as _coll
from tandem._compression import Compression, OneBit, PowerSGD, TwoBit
from tandem import _torch_elastic as elastic  # tandem.torch.elastic.TorchState, .run

# dist.init_process_group("tandem") after `import tandem.torch`.
_c10d_backend.register()

# The reductions (Horovod's hvd.Sum, hvd.Average, ...). Here, as in Horovod,
# allreduce and DistributedOptimizer average unless told otherwise.
Sum = _coll.Sum
Average = _coll.Average
Min = _coll.Min
Max = _coll.Max
Product = _coll.Product


def _named(named_parameters, optimizer) -> list[tuple[str, torch.nn.Parameter]]:
    if named_parameters is not None:
        named = list(named_parameters)
    else:
        named = [(f"param.{g}.{i}", p) for g, group in enumerate(optimizer.param_groups)
                 for i, p in enumerate(group["params"])]
    names = [n for n, _ in named]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise _core.InvalidArgument(f"named_parameters has duplicate names: {dup}")
    if optimizer is not None:
        given = {id(p) for _, p in named}
        for group in optimizer.param_groups:
            for p in group["params"]:
                if id(p) not in given:
                    raise _core.InvalidArgument(
                        f"the optimizer has a parameter of shape {list(p.shape)} that is not "
                        "in named_parameters")
    return named


def _accumulator(p: torch.Tensor):
    """The AccumulateGrad node of a leaf parameter (where its .grad is set)."""
    return p.expand_as(p).grad_fn.next_functions[0][0]


class _HookedOptimizer:
    """What both distributed optimizers share: the wrapped optimizer (its
    attributes pass through), named parameters, one hook per parameter, and
    the handles started during backward. Used from the training thread
    (autograd runs CPU hooks on the thread that called backward())."""

    def __init__(self, optimizer, named_parameters):
        self._opt = optimizer
        self._named = [(n, p) for n, p in _named(named_parameters, optimizer) if p.requires_grad]
        self._index = {id(p): i for i, (_, p) in enumerate(self._named)}
        self._pending: dict[int, object] = {}  # parameter index -> handle(s)
        self._started_in_backward = 0
        self._accumulators = []
        for i, (_, p) in enumerate(self._named):
            acc = _accumulator(p)
            acc.register_hook(self._make_hook(i))
            self._accumulators.append(acc)  # keeps the node (and its hook) alive

    def _make_hook(self, i: int):
        def hook(*_):
            if getattr(self, "_joining", False):
                return  # synchronize() starts every reduction, in index order
            name, p = self._named[i]
            if i in self._pending:
                raise _core.InvalidArgument(
                    f"the gradient of '{name}' was produced twice before step(); tandem "
                    "reduces one backward pass per step (call step() or synchronize() first)")
            self._pending[i] = self._start(i, name, p)
            self._started_in_backward += 1
        return hook

    @property
    def started_in_backward(self) -> int:
        """Gradients whose communication started inside backward() since the
        last step() (the overlap the hooks bring)."""
        return self._started_in_backward

    def __getattr__(self, name):
        opt = self.__dict__.get("_opt")
        if opt is None:
            raise AttributeError(name)
        return getattr(opt, name)

    @property
    def param_groups(self):
        return self._opt.param_groups

    @property
    def state(self):
        return self._opt.state

    def state_dict(self):
        return self._opt.state_dict()

    def load_state_dict(self, state_dict) -> None:
        self._opt.load_state_dict(state_dict)

    def abandon_step(self) -> None:
        """Drops the reductions of a step that an error interrupted (a
        worker left an elastic job: tandem.MembershipChanged): waits for
        each to end, ignoring its error, so that the next backward() starts
        afresh. tandem.torch.elastic.TorchState.restore() calls it."""
        for pending in self._pending.values():
            for h in pending if isinstance(pending, tuple) else (pending,):
                if hasattr(h, "wait"):
                    try:
                        h.wait()
                    except _core.Error:
                        pass  # the step is abandoned: its error is the one raised already
        self._pending.clear()
        self._started_in_backward = 0

    def _start_missing(self) -> None:
        for i, (name, p) in enumerate(self._named):
            if i not in self._pending:
                if p.grad is None:
                    p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
                self._pending[i] = self._start(i, name, p)

    def zero_grad(self, set_to_none: bool = False) -> None:
        if self._pending:
            raise _core.InvalidArgument(
                f"zero_grad() while {len(self._pending)} gradients are being reduced; call it "
                "before backward() or after step()")
        if self._opt is not None:
            self._opt.zero_grad(set_to_none=set_to_none)
        else:
            for _, p in self._named:
                if p.grad is not None:
                    p.grad = None if set_to_none else p.grad.zero_()


def _contiguous_grad(p: torch.Tensor) -> torch.Tensor:
    g = p.grad
    if not g.is_contiguous():  # a copy, copied back when the reduction is done
        return g.contiguous()
    return g


class DistributedOptimizer(_HookedOptimizer):
    """Wraps a torch optimizer: gradients are averaged over every worker
    (tandem.allreduce, op `op`) before each step, their reduction started by
    hooks during backward. Requires tandem.init().

    Thread-safety: use from the training thread.
    """

    def __init__(self, optimizer: torch.optim.Optimizer,
                 named_parameters: Optional[Iterable] = None, op: str = Average,
                 group: Optional[_coll.Communicator] = None, negotiate: bool = False,
                 compression=Compression.none, error_feedback: bool = False):
        """negotiate=True reduces through the framework engine
        (tandem.engine()): Horovod's semantics, where ranks may produce
        their gradients in different orders, small ones are fused, and a
        gradient some ranks never produce is reported after
        TANDEM_STALL_WARNING_SECONDS naming it and the missing ranks.
        Without it (the default) each gradient is its own allreduce in the
        order the hooks fire, which must be the same on every rank: a rank
        whose order or shapes differ raises tandem.CallMismatch on every
        rank. negotiate=True works over every worker only (no group).

        compression (Compression.none, .fp16, .bf16, their names, or a
        compressor of Horovod's shape) is what the gradients travel as;
        every rank must use the same one (else tandem.CallMismatch). With
        error_feedback=True, what compression rounded off a gradient is
        kept on this rank and added to that parameter's next gradient
        before it is compressed. compression=PowerSGD(rank=r, ...) sends
        low-rank factors instead (two allreduces per compressed gradient;
        its own error feedback; not with negotiate=True).
        wire_bytes_per_step says what one step's gradients came to on the
        wire (this rank's payload)."""
        if not _coll.is_initialized():
            raise _core.InvalidArgument("DistributedOptimizer needs tandem.init() first")
        if negotiate and group is not None:
            raise _core.InvalidArgument("DistributedOptimizer: negotiate=True runs over every "
                                        "worker; it takes no group")
        self._op = op
        self._group = group
        self._powersgd = compression if isinstance(compression, PowerSGD) else None
        if self._powersgd is not None:
            if negotiate:
                raise _core.InvalidArgument("DistributedOptimizer: PowerSGD exchanges two "
                                            "factors per gradient in order; it does not run "
                                            "with negotiate=True")
            if op not in (Average, "avg", "average"):
                raise _core.InvalidArgument(f"DistributedOptimizer: PowerSGD averages; op "
                                            f"{op!r} is not supported with it")
            compression = Compression.none
        self._compression = _compression.resolve(compression)
        self._quantizer = None
        if isinstance(self._compression, _compression._Quantized):
            if negotiate:
                raise _core.InvalidArgument(
                    f"DistributedOptimizer: {self._compression.type} gradients are allgathered "
                    "in order; they do not run with negotiate=True")
            if op not in (Average, "average", Sum):
                raise _core.InvalidArgument(
                    f"DistributedOptimizer: {self._compression.type} gradients are summed or "
                    f"averaged; op {op!r} is not supported with them")
            self._quantizer = self._compression
            self._compression = Compression.none
        self._error_feedback = bool(error_feedback)
        self._residuals: dict[int, torch.Tensor] = {}  # parameter index -> rounded-off part
        self._step_bytes = 0
        self.wire_bytes_per_step = 0
        self._engine = _coll.engine() if negotiate else None
        super().__init__(optimizer, named_parameters)
        if self._powersgd is not None:
            self._powersgd.check(self._named)

    def _start(self, i: int, name: str, p: torch.Tensor, feedback: bool = True):
        g = _contiguous_grad(p)
        psgd = self._powersgd
        if psgd is not None and psgd.steps >= psgd.start_iter and psgd.rank_for(g.shape):
            m, pm, q = psgd.begin(i, g, feedback)
            self._step_bytes += pm.numel() * pm.element_size()
            h = _coll.allreduce_async(pm, "sum", out=pm, name=f"{name} (PowerSGD P)",
                                      group=self._group)
            return (h, g, pm, (m, q, feedback))
        quantizer = self._quantizer
        if quantizer is not None and g.dtype == torch.float32:
            # The residual is MXNet's error feedback, always on; a shadowing
            # rank (feedback=False) quantises zeros with none.
            residual = None
            if feedback:
                residual = self._residuals.get(i)
                if residual is None:
                    residual = self._residuals[i] = torch.zeros_like(g)
            words = quantizer.quantize(g, residual)
            self._step_bytes += words.numel()
            gathered = torch.empty((_coll.size(self._group), words.numel()), dtype=torch.uint8)
            h = _coll.allgather_async(words, out=gathered, name=f"{name} ({quantizer.type})",
                                      group=self._group)
            return (h, g, gathered, quantizer)
        send, ctx = g, None
        if self._compression is not _compression.NoneCompressor:
            feedback = feedback and self._error_feedback
            x = g + self._residuals[i] if feedback and i in self._residuals else g
            send, ctx = self._compression.compress(x)
            if send is x:
                # Nothing compressed (not floating point): no residual was
                # ever kept for it, so x is the gradient itself.
                send, ctx = g, None
            elif feedback:
                self._residuals[i] = x - self._compression.decompress(send, ctx)
        self._step_bytes += send.numel() * send.element_size()
        if self._engine is not None:
            # The process's engine: tandem.regroup() makes a new one after a
            # change of an elastic job's workers.
            self._engine = _coll.engine()
            h = _coll.Handle(self._engine.allreduce_async(send, send, self._op, name=name), send)
        else:
            h = _coll.allreduce_async(send, self._op, out=send, name=name, group=self._group)
        return (h, g, send, ctx)

    def synchronize(self) -> None:
        """Starts the reductions the hooks did not (unused parameters; zero
        gradients for those without one), waits for all, and leaves the
        averaged gradients in .grad. Inside join(), first tells the ranks
        that have run out of data that this one has not."""
        if self._joining:
            _coll.allreduce_(torch.ones(1, dtype=torch.int64), "sum", name=_JOIN_FLAG,
                             group=self._group)
        self._start_missing()
        self._wait_pending()

    def _wait_pending(self) -> None:
        """Waits for the reductions started and leaves them in .grad."""
        second = {}  # PowerSGD's Q allreduces, started once every P is summed
        for i, (h, g, send, ctx) in sorted(self._pending.items()):
            h.wait()
            if self._powersgd is not None and isinstance(ctx, tuple):
                m, _, _ = ctx
                q = self._powersgd.middle(m, send)
                self._step_bytes += q.numel() * q.element_size()
                second[i] = _coll.allreduce_async(q, Average, out=q,
                                                  name=f"{self._named[i][0]} (PowerSGD Q)",
                                                  group=self._group)
                continue
            if isinstance(ctx, _compression._Quantized):
                ctx.sum_into(g, send, average=self._op != Sum)
            elif send is not g:
                g.copy_(self._compression.decompress(send, ctx))
            self._copy_back(i, g)
        for i, h in second.items():
            _, g, pm, (m, _, feedback) = self._pending[i]
            self._powersgd.end(i, g, m, pm, h.wait(), feedback)
            self._copy_back(i, g)
        self._pending.clear()
        self._started_in_backward = 0
        self.wire_bytes_per_step = self._step_bytes
        self._step_bytes = 0
        if self._powersgd is not None:
            self._powersgd.steps += 1

    def _copy_back(self, i: int, g: torch.Tensor) -> None:
        p = self._named[i][1]
        if g.data_ptr() != p.grad.data_ptr():
            p.grad.copy_(g)

    def step(self, closure=None):
        """synchronize(), then the wrapped optimizer's step()."""
        self.synchronize()
        return self._opt.step(closure) if closure is not None else self._opt.step()

    def join(self) -> "_Join":
        """A context for uneven inputs, like DDP's join(): train inside it
        until this rank's data ends; on leaving it, the rank shadows the
        other ranks' steps (it contributes zero gradients to each and
        applies the reduced gradients with its optimizer, so every replica
        keeps the same parameters and optimizer state) until every rank has
        left it, so no rank hangs in a reduction its peers never make. Inside it the gradients are reduced in parameter order
        at step() (not during backward), with one small extra allreduce per
        step; avg divides by the number of workers, joined ones included
        (DDP's divide_by_initial_world_size=True). An exception inside the
        context leaves at once, without shadowing. Not with 1bit
        compression, which has no code for a zero gradient."""
        if isinstance(self._quantizer, OneBit):
            raise _core.InvalidArgument(
                "DistributedOptimizer.join(): 1bit sends every value as +1 or -1, so a rank "
                "that has run out of data cannot contribute zeros; use 2bit or another "
                "compression with join()")
        return _Join(self)

    @property
    def _joining(self) -> bool:
        return self.__dict__.get("_join_active", False)

    def _shadow_until_all_joined(self) -> int:
        """Shadows the other ranks' steps; returns how many it shadowed."""
        shadowed = 0
        while True:
            active = torch.zeros(1, dtype=torch.int64)
            _coll.allreduce_(active, "sum", name=_JOIN_FLAG, group=self._group)
            if int(active.item()) == 0:
                return shadowed
            # Zero gradients in, the others' reduced gradients out, applied
            # as they are: the replicas (and optimizer states) stay equal.
            for i, (name, p) in enumerate(self._named):
                if p.grad is None:
                    p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
                else:
                    p.grad.zero_()
                # Zeros, not this rank's residual: it has no gradient left.
                self._pending[i] = self._start(i, name, p, feedback=False)
            self._wait_pending()
            self._opt.step()
            shadowed += 1


# The name of join()'s per-step allreduce of "this rank still has data".
_JOIN_FLAG = "tandem.torch.join: ranks with data"


class _Join:
    """DistributedOptimizer.join()'s context manager."""

    def __init__(self, optimizer: DistributedOptimizer):
        self._opt = optimizer
        self.shadowed_steps = 0

    def __enter__(self):
        if self._opt._pending:
            raise _core.InvalidArgument("join(): gradients are being reduced; enter it before "
                                        "backward() or after step()")
        self._opt.__dict__["_join_active"] = True
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.shadowed_steps = self._opt._shadow_until_all_joined()
        finally:
            self._opt.__dict__["_join_active"] = False
        return False


class KVStoreOptimizer(_HookedOptimizer):
    """Data-parallel training through tandem's parameter server.

    The parameters of named_parameters (requires_grad ones) become keys in
    order; the constructor initialises every key from worker 0's value and
    pulls it, so all replicas start from worker 0's weights. During backward
    each parameter's gradient is pushed (pushpull, asynchronous, priority
    -key so that the first layers go first). Two modes:

    - `optimizer` (a torch optimizer), update on the workers: the servers
      only sum (store without an optimizer; dist_sync or local); step()
      divides the sums by the number of workers into .grad and runs the
      optimizer. Every replica applies the same update. A gradient of more
      than `partition_bytes` (BytePS's BYTEPS_PARTITION_BYTES, 4096000 by
      default; 0: never) is cut into floor(bytes / partition_bytes) equal
      parts, each a key of its own, so that the sums of the first parts
      come back while the later ones are still being pushed.
    - `server_optimizer` (MXNet's name, "sgd", "adam", ...; `server_params`
      its parameters), update on the servers (dist_sync or dist_async):
      step() copies the pulled weights into the parameters. rescale_grad
      defaults to 1/num_workers (the average gradient). One key per
      parameter (an optimizer may use a whole tensor's norm).

    Thread-safety: use from the training thread.
    """

    def __init__(self, kvstore, named_parameters, optimizer: Optional[torch.optim.Optimizer] = None,
                 server_optimizer: Optional[str] = None, partition_bytes: int = 4096000,
                 overlap_forward: Optional[torch.nn.Module] = None, **server_params):
        if (optimizer is None) == (server_optimizer is None):
            raise _core.InvalidArgument(
                "KVStoreOptimizer takes exactly one of optimizer (update on the workers) and "
                "server_optimizer (update on the servers)")
        if overlap_forward is not None and optimizer is None:
            raise _core.InvalidArgument(
                "KVStoreOptimizer: overlap_forward updates each parameter on the workers as "
                "its sum arrives; it needs optimizer= (not server_optimizer)")
        if partition_bytes < 0:
            raise _core.InvalidArgument(f"partition_bytes must be >= 0, got {partition_bytes}")
        self._kv = kvstore
        self._server_side = server_optimizer is not None
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        if overlap_forward is not None:
            # Before any hook is registered: a refused optimizer leaves none.
            owned = {id(p) for p in overlap_forward.parameters()}
            missing = [n for n, p in _named(named_parameters, optimizer)
                       if p.requires_grad and id(p) not in owned]
            if missing:
                raise _core.InvalidArgument(
                    f"KVStoreOptimizer: overlap_forward's model does not own parameters "
                    f"{missing} of named_parameters")
        super().__init__(optimizer, named_parameters)
        self._in_flight: dict[int, tuple[list, torch.Tensor]] = {}
        self._step_returned_ns = 0
        self.last_forward_overlap_s = 0.0
        self._overlap = overlap_forward is not None
        if self._overlap:
            self._arm_forward(overlap_forward)
        if self._server_side:
            params = dict(server_params)
            params.setdefault("rescale_grad", 1.0 / kvstore.num_workers)
            kvstore.set_optimizer(server_optimizer, **params)
        self._weights = []
        self._parts: list[list[tuple[int, int, int]]] = []  # per parameter: (key, begin, end)
        key = 0
        for name, p in self._named:
            if not p.is_contiguous():
                raise _core.InvalidArgument(f"parameter '{name}' is not contiguous")
            n = p.numel()
            pieces = 1
            if not self._server_side and partition_bytes > 0:
                pieces = max(1, n * p.element_size() // partition_bytes)
            size = -(-n // pieces)
            parts = [(key + j, j * size, min(n, (j + 1) * size)) for j in range(pieces)]
            key += pieces
            self._parts.append(parts)
            for k, view in self._views(len(self._parts) - 1, p.data):
                kvstore.init(k, view)
                kvstore.pull(k, out=view)
            self._weights.append(torch.empty_like(p.data) if self._server_side else None)

    def _arm_forward(self, model: torch.nn.Module) -> None:
        """overlap_forward: a pre-hook on every module that owns parameters
        applies their updates before its forward runs, and a gradient hook
        refuses a parameter used while its update is still in flight."""
        self._group_of = {}
        for group in self._opt.param_groups:
            for p in group["params"]:
                self._group_of[id(p)] = group
        for module in model.modules():
            own = [self._index[id(p)] for p in module.parameters(recurse=False)
                   if id(p) in self._index]
            if own:
                module.register_forward_pre_hook(self._make_pre_hook(own))
        for i, (_, p) in enumerate(self._named):
            p.register_hook(self._make_stale_guard(i))

    def _make_pre_hook(self, indices: list[int]):
        def pre_hook(module, inputs):
            waiting = [i for i in indices if i in self._in_flight]
            if waiting:
                start = time.monotonic_ns()
                for i in waiting:
                    self._finish(i)
                _node.record_span("forward", f"update {type(module).__name__} "
                                  f"({', '.join(self._named[i][0] for i in waiting)})",
                                  start, time.monotonic_ns())
        return pre_hook

    def _make_stale_guard(self, i: int):
        def guard(grad):
            if i in self._in_flight:
                raise _core.InvalidArgument(
                    f"parameter '{self._named[i][0]}' took part in the forward pass while its "
                    "update was still in flight: with overlap_forward every parameter must be "
                    "used inside the forward of a module that owns it (or call synchronize() "
                    "before the forward pass)")
            return grad
        return guard

    def _finish(self, i: int) -> None:
        """Waits for parameter i's sums and steps the optimizer on it alone
        (overlap_forward), then zeroes its gradient for the next backward."""
        handles, g = self._in_flight.pop(i)
        for h in handles:
            h.wait()
        p = self._named[i][1]
        with torch.no_grad():
            g.div_(self._kv.num_workers)
            if g.data_ptr() != p.grad.data_ptr():
                p.grad.copy_(g)
        groups = self._opt.param_groups
        one = dict(self._group_of[id(p)])
        one["params"] = [p]
        self._opt.param_groups = [one]
        try:
            self._opt.step()
        finally:
            self._opt.param_groups = groups
        p.grad.zero_()
        if not self._in_flight:
            self.last_forward_overlap_s = (time.monotonic_ns() - self._step_returned_ns) / 1e9

    def _finish_in_flight(self) -> None:
        for i in sorted(self._in_flight):
            self._finish(i)

    def _views(self, i: int, t: torch.Tensor) -> list[tuple[int, torch.Tensor]]:
        """(key, view of t) for each part of parameter i: t itself when the
        parameter is one key, else slices of its flattened elements."""
        parts = self._parts[i]
        if len(parts) == 1:
            return [(parts[0][0], t)]
        flat = t.view(-1)
        return [(k, flat[a:b]) for k, a, b in parts]

    @property
    def num_keys(self) -> int:
        """Keys in the store: one per parameter, more where gradients are
        partitioned."""
        return sum(len(parts) for parts in self._parts)

    def _start(self, i: int, name: str, p: torch.Tensor):
        g = _contiguous_grad(p)
        out = self._weights[i] if self._server_side else g
        handles = []
        for (k, grad), (_, dest) in zip(self._views(i, g), self._views(i, out)):
            handles += self._kv.pushpull_async(k, grad, out=dest, priority=-k)
        return (handles, g)

    def synchronize(self) -> None:
        """Pushes what the hooks did not, waits for every push and pull, and
        leaves the averaged gradients in .grad (update on the workers) or
        the new weights in the parameters (update on the servers). With
        overlap_forward it first applies the updates still in flight, and
        that is all it does when no backward pass ran since the last step()
        (before evaluating or saving the model)."""
        self._finish_in_flight()
        if self._overlap and not self._pending:
            return
        self._start_missing()
        n = self._kv.num_workers
        for i, (handles, g) in sorted(self._pending.items()):
            for h in handles:
                h.wait()
            p = self._named[i][1]
            with torch.no_grad():
                if self._server_side:
                    p.copy_(self._weights[i])
                else:
                    g.div_(n)
                    if g.data_ptr() != p.grad.data_ptr():
                        p.grad.copy_(g)
        self._pending.clear()
        self._started_in_backward = 0

    def step(self, closure=None):
        """synchronize(), then (update on the workers) the optimizer's step().
        With overlap_forward it returns once every gradient is pushed: each
        parameter is updated when the next forward pass reaches its module
        (or at the next synchronize(), step() or state_dict())."""
        if closure is not None:
            with torch.enable_grad():
                closure()
        if self._overlap:
            self._finish_in_flight()  # parameters the last forward pass did not reach
            self._start_missing()
            self._in_flight, self._pending = self._pending, {}
            self._started_in_backward = 0
            self._step_returned_ns = time.monotonic_ns()
            return
        self.synchronize()
        if not self._server_side:
            self._opt.step()

    def zero_grad(self, set_to_none: bool = False) -> None:
        """As the wrapped optimizer's; with overlap_forward the gradients of
        updates still in flight are left alone (each is zeroed when its
        update is applied)."""
        if not self._in_flight:
            super().zero_grad(set_to_none)
            return
        if self._pending:
            super().zero_grad(set_to_none)  # raises, naming the reductions
        for i, (_, p) in enumerate(self._named):
            if i not in self._in_flight and p.grad is not None:
                p.grad = None if set_to_none else p.grad.zero_()

    def state_dict(self):
        self._finish_in_flight()
        return self._opt.state_dict()


# -- DDP's communication hook through the parameter server --


class KVStoreHookState:
    """The state of kvstore_hook: DDP's gradient buckets summed by tandem's
    parameter servers instead of allreduced among the workers (BytePS's
    summation on spare CPU hosts, for an unchanged DDP script):

        kv = tandem.kvstore.create("dist_sync")
        ddp.register_comm_hook(tt.KVStoreHookState(kv), tt.kvstore_hook)

    Each bucket (DDP's index and size; DDP rebuilds its buckets once after
    the first step, and a new layout gets keys of its own) becomes keys
    key_offset, key_offset + 1, ...: floor(bytes / partition_bytes) equal
    parts (BytePS's partitioning; 0: one key per bucket), each initialised
    the first time it is seen, on every worker in the same order as DDP
    calls the hook. The store must sum (dist_sync without an optimizer).
    A background thread waits for each bucket's pushpulls and completes
    its future with the sum divided by the number of workers, as DDP's
    allreduce_hook averages.

    Thread-safety: DDP calls the hook from its backward; one state per
    DDP model.
    """

    def __init__(self, kvstore, partition_bytes: int = 4096000, key_offset: int = 0):
        if partition_bytes < 0:
            raise _core.InvalidArgument(f"partition_bytes must be >= 0, got {partition_bytes}")
        self.kvstore = kvstore
        self.partition_bytes = int(partition_bytes)
        self._next_key = int(key_offset)
        self._layouts: dict[tuple[int, int, torch.dtype], list[tuple[int, int, int]]] = {}
        self._done: "queue.Queue" = queue.Queue()
        self._waiter: Optional[threading.Thread] = None

    @property
    def num_keys(self) -> int:
        """Keys the buckets took so far."""
        return sum(len(parts) for parts in self._layouts.values())

    def _parts(self, index: int, buf: torch.Tensor) -> list[tuple[int, int, int]]:
        """(key, begin, end) of bucket `index` laid out as `buf`; a layout
        seen for the first time takes new keys and initialises them."""
        layout = (index, buf.numel(), buf.dtype)
        parts = self._layouts.get(layout)
        if parts is None:
            n = buf.numel()
            pieces = 1
            if self.partition_bytes > 0:
                pieces = max(1, n * buf.element_size() // self.partition_bytes)
            size = -(-n // pieces)
            parts = [(self._next_key + j, j * size, min(n, (j + 1) * size))
                     for j in range(pieces)]
            self._next_key += pieces
            for k, a, b in parts:
                self.kvstore.init(k, buf[a:b])
            self._layouts[layout] = parts
        return parts

    def _wait_loop(self) -> None:
        while True:
            handles, buf, fut = self._done.get()
            try:
                for h in handles:
                    h.wait()
                fut.set_result(buf.div_(self.kvstore.num_workers))
            except Exception as e:  # noqa: BLE001  (DDP raises it from the future)
                fut.set_exception(e)

    def start(self, index: int, buf: torch.Tensor) -> "torch.futures.Future":
        """Pushes bucket `index` (its flat buffer `buf`) and returns the
        future of its average, in place in `buf`."""
        if not buf.is_contiguous():
            raise _core.InvalidArgument(f"kvstore_hook: bucket {index} is not contiguous")
        handles = []
        for k, a, b in self._parts(index, buf):
            # DDP's bucket 0 holds the last layers: a higher index is an
            # earlier layer, needed first by the next forward pass.
            handles += self.kvstore.pushpull_async(k, buf[a:b], out=buf[a:b], priority=index)
        fut: torch.futures.Future = torch.futures.Future()
        if self._waiter is None:
            self._waiter = threading.Thread(target=self._wait_loop, daemon=True,
                                            name="tandem.torch kvstore_hook")
            self._waiter.start()
        self._done.put((handles, buf, fut))
        return fut


def kvstore_hook(state: KVStoreHookState, bucket) -> "torch.futures.Future":
    """DDP's communication hook (DistributedDataParallel.register_comm_hook)
    that sums each gradient bucket on tandem's parameter servers; `state` is
    a KVStoreHookState. The result is the average over the workers, as
    torch's allreduce_hook gives."""
    return state.start(bucket.index(), bucket.buffer())


# DDP checks the hook's return annotation as an object (this module's
# annotations are strings: `from __future__ import annotations`).
kvstore_hook.__annotations__["return"] = torch.futures.Future[torch.Tensor]


# -- Horovod's functions and defaults (hvd.allreduce averages) --


def allreduce_async_(tensor: torch.Tensor, op: str = Average, **kwargs) -> _coll.Handle:
    """Horovod's hvd.allreduce_async_: in place, averaging unless `op` says
    otherwise (tandem.allreduce_async_ sums, as torch.distributed does).
    Takes tandem.allreduce_async's keyword arguments (name, group, ...)."""
    return _coll.allreduce_async(tensor, op, out=tensor, **kwargs)


def allreduce_(tensor: torch.Tensor, op: str = Average, **kwargs) -> torch.Tensor:
    """Horovod's hvd.allreduce_: in place, averaging by default."""
    return allreduce_async_(tensor, op, **kwargs).wait()


def allreduce(tensor: torch.Tensor, op: str = Average, compression=Compression.none,
              **kwargs) -> torch.Tensor:
    """Horovod's hvd.allreduce: a new tensor, averaging by default; with
    `compression` (Compression.fp16, ...) the tensor travels compressed and
    the result comes back in its dtype."""
    compressor = _compression.resolve(compression)
    if isinstance(compressor, _compression._Quantized):
        raise _core.InvalidArgument(
            f"allreduce: {compressor.type} keeps a residual per gradient; use it through "
            "DistributedOptimizer(compression=...)")
    send, ctx = compressor.compress(tensor)
    if send is tensor:
        return _coll.allreduce(tensor, op, **kwargs)
    return compressor.decompress(_coll.allreduce_(send, op, **kwargs), ctx)


def broadcast_parameters(params, root_rank: int = 0,
                         group: Optional[_coll.Communicator] = None) -> None:
    """Copies root_rank's values of `params` (a state_dict, or an iterable
    of (name, tensor) such as model.named_parameters()) into every rank's,
    in place, in name order. Requires tandem.init()."""
    items = sorted(params.items() if isinstance(params, dict) else list(params),
                   key=lambda kv: kv[0])
    handles = []
    for name, t in items:
        if not isinstance(t, torch.Tensor):
            raise _core.InvalidArgument(f"broadcast_parameters: '{name}' is a "
                                        f"{type(t).__name__}, not a tensor")
        data = t.data
        buf = data if data.is_contiguous() else data.contiguous()
        handles.append((_coll.broadcast_async_(buf, root_rank, name=name, group=group), data, buf))
    for h, data, buf in handles:
        h.wait()
        if buf.data_ptr() != data.data_ptr():
            data.copy_(buf)


def broadcast_object(obj, root_rank: int = 0, group: Optional[_coll.Communicator] = None):
    """Returns root_rank's `obj` on every rank (serialised with torch.save:
    tensors, dicts, numbers). Requires tandem.init()."""
    if _coll.rank(group) == root_rank:
        stream = io.BytesIO()
        torch.save(obj, stream)
        payload = np.frombuffer(stream.getbuffer(), dtype=np.uint8).copy()
        length = np.array([payload.size], dtype=np.int64)
    else:
        length = np.zeros(1, dtype=np.int64)
    _coll.broadcast_(length, root_rank, name="broadcast_object length", group=group)
    if _coll.rank(group) != root_rank:
        payload = np.empty(int(length[0]), dtype=np.uint8)
    _coll.broadcast_(payload, root_rank, name="broadcast_object payload", group=group)
    if _coll.rank(group) == root_rank:
        return obj
    return torch.load(io.BytesIO(payload.tobytes()))


def broadcast_optimizer_state(optimizer, root_rank: int = 0,
                              group: Optional[_coll.Communicator] = None) -> None:
    """Makes every rank's optimizer state (momentum buffers, step counts,
    hyper-parameters) root_rank's: its state_dict is serialised on the root,
    broadcast, and loaded elsewhere. Requires tandem.init()."""
    state = broadcast_object(optimizer.state_dict(), root_rank, group)
    if _coll.rank(group) != root_rank:
        optimizer.load_state_dict(state)
