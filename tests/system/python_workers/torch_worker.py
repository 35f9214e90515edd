"""A worker of tests/system/test_python_torch.py: trains a small model for
K steps with tandem.torch and checks (1) the replicas: it prints a hash of
its parameters (the test compares them across ranks: identical bits), and
(2) equivalence: every rank regenerates every rank's batch and trains a
reference copy of the model alone on the union (plain torch, the same
optimizer); the distributed parameters must equal the reference within
float reassociation (rtol 1e-5, atol 1e-6): the mean of the ranks' mean-loss
gradients is the mean-loss gradient of the union when batches are equal.

With --compression fp16|bf16 (allreduce mode) the gradients travel
compressed: the reference then trains on the ranks' gradients computed
one by one, each compressed and decompressed as its rank's was (with the
rank's error-feedback residual under --error-feedback) and averaged in
float32, and the parameters must match it within the rounding of the
reduction's partial sums in the wire dtype (atol 1e-4 fp16, 1e-3 bf16).

With --compression powersgd --powersgd-rank R: at a rank that covers every
matrix (R >= 16, --powersgd-min-rate 0) the projection is exact and the
parameters must match the uncompressed reference (rtol 1e-5, atol 1e-6);
at a low rank they are only checked to be finite, changed and identical
across ranks (the test checks the bytes on the wire).

With --compression 2bit|1bit --threshold T every rank's gradient is
quantised with its residual (always), the quantised words allgathered and
each rank's expanded and summed: the reference quantises every rank's
gradient with a quantiser written here from docs/gradient-compression.md,
so the parameters must match it exactly up to float reassociation (rtol
1e-5, atol 1e-6).

With --negotiate (allreduce mode) the gradients go through the framework
engine (DistributedOptimizer(negotiate=True)), and the worker prints the
engine's settings in force and, on rank 0 under autotune, its progress.

    torch_worker.py --mode allreduce|ps-worker-update|ps-server-update [--steps K]
                    [--negotiate] [--compression none|fp16|bf16|powersgd|2bit|1bit] [--threshold T]
                    [--error-feedback]
                    [--powersgd-rank R] [--powersgd-start S] [--powersgd-min-rate X]
"""

from __future__ import annotations

import argparse
import hashlib
import sys

import torch
import torch.nn as nn

import tandem
import tandem.torch as tt

BATCH = 8


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)  # a different start per rank: broadcast must fix it
    return nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, 3))


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(BATCH, 10, generator=g), torch.randint(0, 3, (BATCH,), generator=g)


def digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for _, p in sorted(model.state_dict().items()):
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


class ReferenceQuantizer:
    """docs/gradient-compression.md's 2bit and 1bit, as a compressor of
    Horovod's shape whose input already holds the residual: 2bit sends
    +-t where the value reaches +-t and 0 elsewhere, 1bit +1 above t and
    -1 elsewhere."""

    def __init__(self, kind: str, threshold: float):
        self.kind, self.t = kind, torch.tensor(threshold, dtype=torch.float32)

    def compress(self, g: torch.Tensor):
        if self.kind == "2bit":
            zero = torch.zeros_like(g)
            return torch.where(g >= self.t, self.t, torch.where(g <= -self.t, -self.t, zero)), None
        return torch.where(g > self.t, torch.ones_like(g), -torch.ones_like(g)), None

    @staticmethod
    def decompress(c: torch.Tensor, ctx) -> torch.Tensor:
        return c


def reference_step(reference, ref_opt, loss_fn, step, n, compressor, residuals) -> None:
    """One step of the compressed reference: every rank's gradient on the
    reference's parameters, compressed and decompressed as that rank's
    DistributedOptimizer does (residuals[r][i]: rank r's error feedback),
    averaged in float32."""
    total = [torch.zeros_like(p) for p in reference.parameters()]
    for r in range(n):
        x, y = batch(r, step)
        reference.zero_grad()
        loss_fn(reference(x), y).backward()
        for i, p in enumerate(reference.parameters()):
            g = p.grad.detach().clone()
            if residuals is not None and residuals[r][i] is not None:
                g = g + residuals[r][i]
            c, ctx = compressor.compress(g)
            d = compressor.decompress(c, ctx)
            if residuals is not None:
                residuals[r][i] = g - d
            total[i] += d
    ref_opt.zero_grad()
    for p, t in zip(reference.parameters(), total):
        p.grad = t / n
    ref_opt.step()


def expect_refusals(checks) -> None:
    """Each (what, call, needle) of `checks`: call() must raise
    tandem.InvalidArgument whose message holds needle; prints
    "torch_worker: misuse WHAT: MESSAGE", or exits 1 naming what passed."""
    for what, call, needle in checks:
        try:
            call()
        except tandem.InvalidArgument as e:
            assert needle in str(e), e
            print(f"torch_worker: misuse {what}: {e}", flush=True)
        else:
            print(f"torch_worker: WRONG {what}: no error", file=sys.stderr, flush=True)
            sys.exit(1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["allreduce", "ps-worker-update", "ps-server-update"],
                    required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--compression", default="none")
    ap.add_argument("--error-feedback", action="store_true")
    ap.add_argument("--powersgd-rank", type=int, default=1)
    ap.add_argument("--partition-bytes", type=int)
    ap.add_argument("--powersgd-start", type=int, default=0)
    ap.add_argument("--powersgd-min-rate", type=float, default=2.0)
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--overlap-forward", action="store_true")
    ap.add_argument("--negotiate", action="store_true",
                    help="allreduce mode: reduce through the framework engine")
    args = ap.parse_args()
    powersgd = args.compression == "powersgd"
    quantized = args.compression in ("2bit", "1bit")
    if quantized:
        compressor = ReferenceQuantizer(args.compression, args.threshold)
    else:
        compressor = tt.Compression.none if powersgd else \
            tt.Compression.by_name(args.compression)
    compressed = compressor is not tt.Compression.none
    loss_fn = nn.CrossEntropyLoss()

    kv = None
    if args.mode == "allreduce":
        tandem.init()
        rank, n = tandem.rank(), tandem.size()
        model = make_model(seed=rank)
        base = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        compression = args.compression
        if powersgd:
            compression = tt.PowerSGD(rank=args.powersgd_rank, start_iter=args.powersgd_start,
                                      min_compression_rate=args.powersgd_min_rate)
        if quantized:
            compression = (tt.TwoBit if args.compression == "2bit" else tt.OneBit)(
                threshold=args.threshold)
        opt = tt.DistributedOptimizer(base, named_parameters=model.named_parameters(),
                                      compression=compression,
                                      error_feedback=args.error_feedback,
                                      negotiate=args.negotiate)
        tt.broadcast_parameters(model.state_dict(), root_rank=0)
        tt.broadcast_optimizer_state(opt, root_rank=0)
        reference_opt = lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    else:
        kv = tandem.kvstore.create("dist_sync")
        rank, n = kv.rank, kv.num_workers
        model = make_model(seed=rank)
        if args.mode == "ps-worker-update":
            base = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            kwargs = {}
            if args.partition_bytes is not None:
                kwargs["partition_bytes"] = args.partition_bytes
            if args.overlap_forward:
                kwargs["overlap_forward"] = model
            opt = tt.KVStoreOptimizer(kv, model.named_parameters(), optimizer=base, **kwargs)
            print(f"torch_worker: keys={opt.num_keys}", flush=True)
            reference_opt = lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        else:
            # The servers' SGD without momentum: w -= lr * rescale_grad * sum.
            opt = tt.KVStoreOptimizer(kv, model.named_parameters(), server_optimizer="sgd",
                                      learning_rate=0.1)
            reference_opt = lambda m: torch.optim.SGD(m.parameters(), lr=0.1)
    # The constructor (PS) or broadcast (allreduce) made every replica worker 0's.
    print(f"torch_worker: start sha={digest(model)}", flush=True)
    # A fresh model with the replica's weights: a deep copy would carry the
    # optimizer's forward hooks (overlap_forward) along.
    reference = make_model(seed=0)
    reference.load_state_dict(model.state_dict())
    ref_opt = reference_opt(reference)

    overlapped = []
    residuals = [[None] * len(list(reference.parameters())) for _ in range(n)]
    for step in range(args.steps):
        x, y = batch(rank, step)
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        overlapped.append(opt.started_in_backward)
        opt.step()
        if compressed:
            reference_step(reference, ref_opt, loss_fn, step, n, compressor,
                           residuals if args.error_feedback or quantized else None)
            continue
        # The reference: one process on the union of the ranks' batches.
        xs, ys = zip(*(batch(r, step) for r in range(n)))
        ref_opt.zero_grad()
        loss_fn(reference(torch.cat(xs)), torch.cat(ys)).backward()
        ref_opt.step()
    if args.overlap_forward:
        # The last step's updates are still in flight: apply them.
        print(f"torch_worker: in flight after the last step={len(opt._in_flight)}", flush=True)
        lone = nn.Linear(2, 2)
        expect_refusals((
            ("overlap stale", lambda: nn.functional.linear(x, model[0].weight).sum().backward(),
             "parameter '0.weight' took part in the forward pass while its update was still "
             "in flight"),
            ("overlap server", lambda: tt.KVStoreOptimizer(kv, lone.named_parameters(),
                                                           server_optimizer="sgd",
                                                           overlap_forward=lone),
             "it needs optimizer= (not server_optimizer)"),
            ("overlap owner", lambda: tt.KVStoreOptimizer(
                kv, model.named_parameters(), optimizer=torch.optim.SGD(model.parameters(), 0.1),
                overlap_forward=lone),
             "overlap_forward's model does not own parameters ['0.weight', '0.bias'"),
        ))
        opt.synchronize()
    params = len([p for p in model.parameters()])
    print(f"torch_worker: overlapped={overlapped} of {params}", flush=True)
    if args.mode == "allreduce":
        print(f"torch_worker: wire_bytes_per_step={opt.wire_bytes_per_step}", flush=True)
    if args.negotiate:
        st = tandem.engine().stats()
        print(f"torch_worker: engine rank={rank} threshold={st['fusion_threshold']} "
              f"cycle_ms={st['cycle_time_ms']} algorithm={st['algorithm']} "
              f"autotune_done={st['autotune_done']} samples={st['autotune_samples']}", flush=True)
    rtol, atol = 1e-5, 1e-6
    if compressed and not quantized:
        rtol, atol = 0.0, (1e-4 if args.compression == "fp16" else 1e-3)
    if powersgd and args.powersgd_rank < 16:  # lossy: no reference to follow
        rtol, atol = float("inf"), float("inf")
        assert all(torch.isfinite(p).all() for p in model.parameters())
    worst = 0.0
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        if not torch.allclose(p, q, rtol=rtol, atol=atol):
            print(f"torch_worker: WRONG {name} differs from the single-process reference by "
                  f"{(p - q).abs().max().item()}", file=sys.stderr, flush=True)
            sys.exit(1)
        worst = max(worst, (p - q).abs().max().item())
    changed = digest(model) != digest(make_model(seed=0))
    print(f"torch_worker: done rank={rank} size={n} steps={args.steps} changed={changed} "
          f"max_diff={worst:.3g} sha={digest(model)}", flush=True)
    # Misuse raises tandem.InvalidArgument with what to do instead.
    x, y = batch(rank, args.steps)
    opt.zero_grad()
    loss_fn(model(x), y).backward()
    expect_refusals((
        ("second backward", lambda: loss_fn(model(x), y).backward(), "produced twice"),
        ("zero_grad", opt.zero_grad, "while"),
    ))
    opt.synchronize()  # the reductions that were started still complete
    if quantized:
        q = compression
        sgd = lambda: torch.optim.SGD(make_model(0).parameters(), lr=0.1)  # noqa: E731
        expect_refusals((
            ("quantized allreduce", lambda: tt.allreduce(torch.ones(3), compression=q),
             "use it through DistributedOptimizer"),
            ("quantized op", lambda: tt.DistributedOptimizer(sgd(), op=tt.Max, compression=q),
             "op 'max' is not supported"),
            ("quantized negotiate", lambda: tt.DistributedOptimizer(sgd(), negotiate=True,
                                                                    compression=q),
             "do not run with negotiate=True"),
            ("quantized dtype", lambda: q._core.quantize(
                torch.ones(4, dtype=torch.float64), torch.zeros(4),
                torch.empty(4, dtype=torch.uint8)), "grad is float64, expected float32"),
            ("quantized size", lambda: q._core.quantize(
                torch.ones(40), torch.zeros(40), torch.empty(4, dtype=torch.uint8)),
             f"out has 4 elements, expected {q._core.quantized_bytes(40)}"),
        ))
        if args.compression == "1bit":
            expect_refusals((("quantized join", opt.join, "1bit sends every value as +1 or -1"),))
    if kv is not None:
        kv.close()
    else:
        tandem.shutdown()


if __name__ == "__main__":
    main()
