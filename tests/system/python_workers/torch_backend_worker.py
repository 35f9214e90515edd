"""A torch.distributed program on the "tandem" backend: every operation
the backend has, with the closed-form result of N ranks' inputs; then
sub-groups, futures, bad input, and DDP on tandem against DDP on a gloo
group of the same ranks. Started by `tandem launch -n N` (env://: RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Prints one line per failed check
and 'torch_backend: ok kind=K rank=R size=N checks=C' at the end.

    torch_backend_worker.py ops|ddp|zero|hooks|fsdp|timeout
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist

import tandem.torch  # noqa: F401  (registers the backend)
from tandem import _c10d



class Checks:
    """Counts checks and collects the failed ones (the run goes on, so that
    the other ranks are not left waiting); finish() prints them, or the
    closing line python_job.check_ok reads."""

    def __init__(self) -> None:
        self.count = 0
        self.failed: list[str] = []

    def expect(self, what: str, ok: bool, detail: str) -> None:
        self.count += 1
        if not ok:
            self.failed.append(f"{what}: {detail}")

    def finish(self, label: str, kind: str, rank: int, size: int) -> None:
        for line in self.failed:
            print(f"{label}: WRONG {line}", file=sys.stderr, flush=True)
        if self.failed:
            sys.exit(1)
        print(f"{label}: ok kind={kind} rank={rank} size={size} checks={self.count}", flush=True)


def check_equal(c: Checks, what: str, got: torch.Tensor, want: torch.Tensor) -> None:
    c.expect(what, got.dtype == want.dtype and torch.equal(got, want),
             f"got {got.tolist()} ({got.dtype}), want {want.tolist()} ({want.dtype})")


def reductions(c: Checks, rank: int, n: int) -> None:
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
                  torch.int64, torch.uint8):
        t = torch.full((5,), rank + 1, dtype=dtype)
        dist.all_reduce(t)
        check_equal(c, f"allreduce sum {dtype}", t, torch.full((5,), n * (n + 1) // 2, dtype=dtype))
    cases = [(dist.ReduceOp.MAX, n), (dist.ReduceOp.MIN, 1),
             (dist.ReduceOp.PRODUCT, math.factorial(n))]
    for op, want in cases:
        t = torch.full((3,), rank + 1, dtype=torch.int64)
        dist.all_reduce(t, op=op)
        check_equal(c, f"allreduce {op}", t, torch.full((3,), want, dtype=torch.int64))
    t = torch.full((4,), float(rank + 1), dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    check_equal(c, "allreduce avg", t, torch.full((4,), (n + 1) / 2, dtype=torch.float64))
    # A large one: the ring's pieces and pipelining.
    t = torch.arange(1 << 18, dtype=torch.float32) * (rank + 1)
    dist.all_reduce(t)
    check_equal(c, "allreduce 1 MiB", t,
                torch.arange(1 << 18, dtype=torch.float32) * (n * (n + 1) // 2))
    tensors = [torch.full((k + 1,), float(rank + k)) for k in range(3)]
    dist.all_reduce_coalesced(tensors)
    for k, t in enumerate(tensors):
        check_equal(c, f"allreduce_coalesced {k}", t,
                    torch.full((k + 1,), float(n * (n - 1) // 2 + n * k)))
    t = torch.full((2,), float(rank + 1))
    dist.reduce(t, dst=n - 1)
    want = float(n * (n + 1) // 2) if rank == n - 1 else float(rank + 1)
    check_equal(c, "reduce to the last rank (others unchanged)", t, torch.full((2,), want))


def movements(c: Checks, rank: int, n: int) -> None:
    t = torch.full((3,), rank * 10, dtype=torch.int32)
    dist.broadcast(t, src=1)
    check_equal(c, "broadcast from 1", t, torch.full((3,), 10, dtype=torch.int32))
    b = torch.tensor([rank % 2 == 0, True])  # bool: moved as bytes
    dist.broadcast(b, src=1)
    check_equal(c, "broadcast bool", b, torch.tensor([False, True]))
    out = [torch.zeros(2) for _ in range(n)]
    dist.all_gather(out, torch.full((2,), float(rank)))
    check_equal(c, "allgather", torch.stack(out), torch.arange(n).float().repeat_interleave(2)
                .reshape(n, 2))
    # Uneven: rank r gives r + 1 elements.
    out = [torch.zeros(r + 1, dtype=torch.int64) for r in range(n)]
    dist.all_gather(out, torch.full((rank + 1,), rank, dtype=torch.int64))
    check_equal(c, "allgather uneven", torch.cat(out),
                torch.cat([torch.full((r + 1,), r, dtype=torch.int64) for r in range(n)]))
    base = torch.zeros(2 * n)
    dist._all_gather_base(base, torch.full((2,), float(rank)))
    check_equal(c, "_allgather_base", base, torch.arange(n).float().repeat_interleave(2))
    outs = [[torch.zeros(1), torch.zeros(2)] for _ in range(n)]
    dist.all_gather_coalesced(outs, [torch.full((1,), float(rank)), torch.full((2,), -rank * 1.0)])
    check_equal(c, "allgather_coalesced", torch.cat([torch.cat(o) for o in outs]),
                torch.cat([torch.tensor([r, -r, -r], dtype=torch.float32) for r in range(n)]))
    gathered = [torch.zeros(2) for _ in range(n)] if rank == n - 1 else None
    dist.gather(torch.full((2,), float(rank * rank)), gathered, dst=n - 1)
    if rank == n - 1:
        check_equal(c, "gather", torch.cat(gathered),
                    torch.tensor([float(r * r) for r in range(n) for _ in range(2)]))
    got = torch.zeros(3)
    dist.scatter(got, [torch.full((3,), 100.0 * r) for r in range(n)] if rank == 0 else None,
                 src=0)
    check_equal(c, "scatter", got, torch.full((3,), 100.0 * rank))
    out = torch.zeros(2)
    dist.reduce_scatter(out, [torch.full((2,), float((rank + 1) * (j + 1))) for j in range(n)])
    check_equal(c, "reduce_scatter", out, torch.full((2,), float((rank + 1) * n * (n + 1) // 2)))
    out = torch.zeros(2)
    dist._reduce_scatter_base(out, torch.arange(2 * n, dtype=torch.float32) + rank)
    want = torch.tensor([2.0 * rank, 2.0 * rank + 1]) * n + n * (n - 1) / 2
    check_equal(c, "_reduce_scatter_base", out, want)


def all_to_all(c: Checks, rank: int, n: int) -> None:
    out = torch.zeros(n, dtype=torch.int64)
    dist.all_to_all_single(out, torch.arange(n, dtype=torch.int64) + 100 * rank)
    check_equal(c, "alltoall_base even", out, torch.arange(n, dtype=torch.int64) * 100 + rank)
    # Uneven: rank r sends r + j + 1 rows of (100 r + j) to rank j.
    send = [rank + j + 1 for j in range(n)]
    receive = [j + rank + 1 for j in range(n)]
    inp = torch.cat([torch.full((s, 2), 100 * rank + j) for j, s in enumerate(send)])
    out = torch.zeros(sum(receive), 2, dtype=inp.dtype)
    dist.all_to_all_single(out, inp, output_split_sizes=receive, input_split_sizes=send)
    want = torch.cat([torch.full((s, 2), 100 * j + rank) for j, s in enumerate(receive)])
    check_equal(c, "alltoall_base uneven", out, want)
    outs = [torch.zeros(j + 1) for j in range(n)]
    dist.all_to_all(outs, [torch.full((rank + 1,), float(10 * rank + j)) for j in range(n)])
    check_equal(c, "alltoall uneven list", torch.cat(outs),
                torch.cat([torch.full((j + 1,), float(10 * j + rank)) for j in range(n)]))


def groups_and_futures(c: Checks, rank: int, n: int) -> None:
    ends = dist.new_group([0, n - 1])
    evens = dist.new_group(list(range(0, n, 2)))
    if rank in (0, n - 1):
        t = torch.tensor([float(rank + 1)])
        dist.all_reduce(t, group=ends)
        check_equal(c, "sub-group [0, last]", t, torch.tensor([float(n + 1)]))
    if rank % 2 == 0:
        t = torch.tensor([1.0])
        dist.all_reduce(t, group=evens)
        check_equal(c, "sub-group of even ranks", t, torch.tensor([float((n + 1) // 2)]))
    t = torch.full((4,), float(rank))
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future().then(lambda f: f.value()[0] * 2)
    check_equal(c, "future then", fut.wait(), torch.full((4,), float(n * (n - 1))))
    c.expect("work completed", work.is_completed(), "is_completed() is False after the future")
    dist.barrier()
    # torch 1.13's dist.monitored_barrier refuses every backend but gloo
    # before reaching it; the group's own method is what it would call.
    dist.distributed_c10d._get_default_group().monitored_barrier(timedelta(seconds=30))
    c.expect("sequence number", dist.distributed_c10d._get_default_group()
             ._get_sequence_number_for_group() > 0, "0 after the operations")


def point_to_point(c: Checks, rank: int, n: int) -> None:
    nxt, prev = (rank + 1) % n, (rank - 1) % n
    # A ring: isend to the next rank, irecv from the previous one.
    out = torch.arange(5, dtype=torch.float64) + 10 * rank
    got = torch.empty(5, dtype=torch.float64)
    works = [dist.isend(out, nxt), dist.irecv(got, prev)]
    for w in works:
        w.wait()
    check_equal(c, "isend/irecv ring", got, torch.arange(5, dtype=torch.float64) + 10 * prev)
    # The same through batch_isend_irecv, in bfloat16, with a tag.
    out = torch.full((3,), float(rank), dtype=torch.bfloat16)
    got = torch.empty(3, dtype=torch.bfloat16)
    ops = [dist.P2POp(dist.isend, out, nxt, tag=4), dist.P2POp(dist.irecv, got, prev, tag=4)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    check_equal(c, "batch_isend_irecv", got, torch.full((3,), float(prev), dtype=torch.bfloat16))
    # Tags keep their own order: rank 0 sends tag 5 then 6; rank 1 takes 6 first.
    if rank == 0:
        dist.send(torch.tensor([5]), 1, tag=5)
        dist.send(torch.tensor([6]), 1, tag=6)
    elif rank == 1:
        six, five = torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long)
        dist.recv(six, 0, tag=6)
        dist.recv(five, 0, tag=5)
        check_equal(c, "tags", torch.cat([six, five]), torch.tensor([6, 5]))
    # From any rank: rank 0 hears every other rank once and learns who sent.
    if rank == 0:
        senders = []
        for _ in range(n - 1):
            t = torch.zeros(2, dtype=torch.int32)
            src = dist.recv(t)
            senders.append(src)
            check_equal(c, f"recv from any rank ({src})", t,
                        torch.tensor([src, 7 * src], dtype=torch.int32))
        c.expect("every sender once", sorted(senders) == list(range(1, n)), f"senders {senders}")
    else:
        dist.send(torch.tensor([rank, 7 * rank], dtype=torch.int32), 0)
    # In a sub-group, ranks are the global ones: 0 sends to the last rank.
    ends = dist.new_group([0, n - 1])
    if rank == 0:
        dist.send(torch.tensor([3.5]), n - 1, group=ends)
    elif rank == n - 1:
        t = torch.zeros(1)
        dist.recv(t, 0, group=ends)
        check_equal(c, "sub-group send/recv", t, torch.tensor([3.5]))
    # A size that differs fails that receive only; the next one works.
    if rank == 0:
        dist.send(torch.ones(5), 1, tag=9)
        dist.send(torch.ones(4) * 2, 1, tag=9)
    elif rank == 1:
        t = torch.zeros(4)
        raises(c, "recv of another size", lambda: dist.recv(t, 0, tag=9), "20 bytes", "16 bytes")
        dist.recv(t, 0, tag=9)
        check_equal(c, "recv after a size error", t, torch.full((4,), 2.0))
    dist.barrier()


def raises(c: Checks, what: str, fn, *needles: str) -> None:
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (the message is what is checked)
        text = str(e)
        c.expect(what, all(s in text for s in needles), f"message {text!r} lacks {needles}")
        return
    c.expect(what, False, "no exception")


def bad_input(c: Checks, rank: int, n: int) -> None:
    raises(c, "non-contiguous", lambda: dist.all_reduce(torch.zeros(4, 4).t()),
           "not contiguous", "allreduce")
    raises(c, "sparse", lambda: dist.all_reduce(torch.zeros(3).to_sparse()), "allreduce")
    raises(c, "unsupported reduce dtype", lambda: dist.all_reduce(torch.zeros(2, dtype=torch.int8)),
           "int8", "float32")
    raises(c, "bitwise op", lambda: dist.all_reduce(torch.zeros(2, dtype=torch.int32),
                                                    op=dist.ReduceOp.BAND), "BAND")
    raises(c, "send to itself", lambda: dist.send(torch.zeros(1), dst=rank), "send",
           f"rank {rank} is this process")
    raises(c, "negative tag", lambda: dist.send(torch.zeros(1), dst=(rank + 1) % n, tag=-2),
           "send", "tag -2")
    # Every rank is a member, so every rank raises before torch's barrier.
    raises(c, "pg_options", lambda: dist.new_group(
        list(range(n)), pg_options=dist.ProcessGroupGloo._Options()), "pg_options")
    # Still usable after errors that were the caller's alone.
    t = torch.ones(2)
    dist.all_reduce(t)
    check_equal(c, "usable after local errors", t, torch.full((2,), float(n)))
    # Ranks that disagree: every rank hears of it, naming both dtypes.
    dtype = torch.float64 if rank == 0 else torch.float32
    raises(c, "dtype mismatch across ranks", lambda: dist.all_reduce(torch.ones(3, dtype=dtype)),
           "float64", "float32")


def ops(c: Checks, rank: int, n: int) -> None:
    c.expect("backend", dist.get_backend() == "tandem", dist.get_backend())
    c.expect("group type", isinstance(dist.distributed_c10d._get_default_group(),
                                      _c10d.ProcessGroupTandem), "not a ProcessGroupTandem")
    reductions(c, rank, n)
    movements(c, rank, n)
    all_to_all(c, rank, n)
    groups_and_futures(c, rank, n)
    point_to_point(c, rank, n)
    bad_input(c, rank, n)


def train(model: torch.nn.Module, group, rank: int, steps: int) -> list[torch.Tensor]:
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group,
                                                    bucket_cap_mb=0.01)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1000 + rank)
    for _ in range(steps):
        x = torch.randn(8, 16, generator=g)
        loss = (ddp(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def ddp(c: Checks, rank: int, n: int) -> None:
    gloo = dist.new_group(list(range(n)), backend="gloo")

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                   torch.nn.Linear(32, 1))

    on_tandem = train(model(), None, rank, 20)
    on_gloo = train(model(), gloo, rank, 20)
    for i, (a, b) in enumerate(zip(on_tandem, on_gloo)):
        c.expect(f"DDP parameter {i} as with gloo", torch.allclose(a, b, rtol=1e-5, atol=1e-6),
                 f"max difference {(a - b).abs().max().item()}")
    # The same on every rank: the replicas did not diverge.
    flat = torch.cat([p.reshape(-1) for p in on_tandem])
    ref = flat.clone()
    dist.broadcast(ref, src=0)
    c.expect("replicas equal", torch.equal(flat, ref), "rank differs from rank 0")


def train_with_hook(group, rank: int, hook_name: str) -> list[torch.Tensor]:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
    model = small_model()
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group,
                                                    bucket_cap_mb=0.01)
    if hook_name == "powerSGD_hook":
        state = powersgd.PowerSGDState(process_group=group, matrix_approximation_rank=1,
                                       start_powerSGD_iter=3, random_seed=0)
        ddp.register_comm_hook(state, powersgd.powerSGD_hook)
    else:
        ddp.register_comm_hook(group, getattr(default_hooks, hook_name))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1000 + rank)
    for _ in range(10):
        x = torch.randn(8, 16, generator=g)
        opt.zero_grad()
        loss_of(ddp, x).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


# The communication hooks torch 1.13 ships, and how close tandem's result
# must be to gloo's (compressed gradients round differently in the last bit).
# bf16_compress_hook is refused by DDP itself in 1.13 without CUDA 11 and
# NCCL 2.10, whatever the backend.
HOOKS = {"allreduce_hook": 1e-5, "fp16_compress_hook": 1e-3,
         "powerSGD_hook": 1e-4}


def hooks(c: Checks, rank: int, n: int) -> None:
    gloo = dist.new_group(list(range(n)), backend="gloo")
    tandem_group = dist.distributed_c10d._get_default_group()
    for name, rtol in HOOKS.items():
        on_tandem = train_with_hook(tandem_group, rank, name)
        on_gloo = train_with_hook(gloo, rank, name)
        worst = max((a - b).abs().max().item() for a, b in zip(on_tandem, on_gloo))
        c.expect(f"DDP with {name} as with gloo",
                 all(torch.allclose(a, b, rtol=rtol, atol=rtol) for a, b in
                     zip(on_tandem, on_gloo)), f"max difference {worst}")
        print(f"torch_backend: {name} max difference to gloo {worst:.3g}", flush=True)


def batches(n: int, steps: int) -> list[torch.Tensor]:
    """Every step's whole batch (8 rows per rank), the same on every rank."""
    g = torch.Generator().manual_seed(7)
    return [torch.randn(8 * n, 16, generator=g) for _ in range(steps)]


def small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def loss_of(model, x: torch.Tensor) -> torch.Tensor:
    return (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()


def alone(steps: list[torch.Tensor]) -> list[torch.Tensor]:
    """Single-process training on the whole batches: the reference."""
    model = small_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for x in steps:
        opt.zero_grad()
        loss_of(model, x).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def compare(c: Checks, what: str, got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    c.expect(f"{what}: parameter count", len(got) == len(want), f"{len(got)} vs {len(want)}")
    for i, (a, b) in enumerate(zip(got, want)):
        c.expect(f"{what}: parameter {i} as trained alone",
                 a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-6),
                 f"max difference {(a - b).abs().max().item() if a.shape == b.shape else a.shape}")


def zero(c: Checks, rank: int, n: int) -> None:
    from torch.distributed.optim import ZeroRedundancyOptimizer
    steps = batches(n, 20)
    model = small_model()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.SGD, lr=0.05,
                                  momentum=0.9)
    for x in steps:
        opt.zero_grad()
        loss_of(ddp, x[8 * rank:8 * (rank + 1)]).backward()
        opt.step()
    compare(c, "ZeroRedundancyOptimizer", [p.detach().clone() for p in model.parameters()],
            alone(steps))


def timeout() -> None:
    """The group's timeout (3 s) ends rank 0's allreduce, which rank 1 never
    joins, with tandem's Timeout naming the operation and the rank."""
    dist.init_process_group("tandem", timeout=timedelta(seconds=3))
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(2))  # raises: the process ends with 201
    else:
        time.sleep(8)


def main() -> None:
    kind = sys.argv[1]
    # all_reduce_coalesced, _all_gather_base, ...: "will be deprecated".
    warnings.filterwarnings("ignore", category=UserWarning, module="torch.distributed")
    if kind == "timeout":
        timeout()
        return
    dist.init_process_group("tandem")
    rank, n = dist.get_rank(), dist.get_world_size()
    c = Checks()
    {"ops": ops, "ddp": ddp, "zero": zero, "hooks": hooks}[kind](c, rank, n)
    c.finish("torch_backend", kind, rank, n)


if __name__ == "__main__":
    main()
