"""A worker of tests/system/test_python_call_checks.py: uneven inputs. Rank r has
STEPS + r batches; it trains a linear model with
tandem.torch.DistributedOptimizer inside opt.join(), so the ranks that run
out of data shadow the others' steps. Then it checks, against a reference
that replays every rank's batches in one process (each step the gradients of
the ranks that still have data, summed and divided by the worker count, as
avg with joined ranks contributing zeros), that its parameters are right,
and prints

    join_worker: ok rank=R size=N shadowed=K digest=HEX

With --twobit T the gradients travel as MXNet's 2bit at threshold T (each
rank's residual kept across its steps, a shadowing rank sending zeros):
the reference quantises each rank's gradient the same way
(docs/gradient-compression.md: +-T where gradient plus residual reaches
+-T, else 0).

    join_worker.py [--negotiate] [--twobit T]
"""

from __future__ import annotations

import argparse
import hashlib
import sys

import torch

import tandem
import tandem.torch as tt

STEPS = 3


def batch(rank: int, step: int):
    g = torch.Generator().manual_seed(100 * rank + step)
    return torch.randn(4, 6, generator=g), torch.randn(4, 2, generator=g)


def model() -> torch.nn.Module:
    torch.manual_seed(7)
    return torch.nn.Linear(6, 2)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--negotiate", action="store_true")
    parser.add_argument("--twobit", type=float)
    args = parser.parse_args()
    torch.set_num_threads(1)
    tandem.init()
    rank, size = tandem.rank(), tandem.size()
    net = model()
    opt = tt.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                  named_parameters=net.named_parameters(),
                                  negotiate=args.negotiate,
                                  compression=tt.TwoBit(args.twobit) if args.twobit else "none")
    with opt.join() as joined:
        for step in range(STEPS + rank):
            x, y = batch(rank, step)
            opt.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            opt.step()
    # The reference: every step, the ranks that still have data.
    ref = model()
    sgd = torch.optim.SGD(ref.parameters(), lr=0.1)
    residuals = {}
    for step in range(STEPS + size - 1):
        total = [torch.zeros_like(p) for p in ref.parameters()]
        for r in range(size):
            if step < STEPS + r:
                ref.zero_grad()
                x, y = batch(r, step)
                torch.nn.functional.mse_loss(ref(x), y).backward()
                for i, (t, p) in enumerate(zip(total, ref.parameters())):
                    g = p.grad
                    if args.twobit:
                        g = g + residuals.get((r, i), torch.zeros_like(g))
                        th = torch.tensor(args.twobit)
                        d = torch.where(g >= th, th, torch.where(g <= -th, -th,
                                                                 torch.zeros_like(g)))
                        residuals[(r, i)] = g - d
                        g = d
                    t += g
        for t, p in zip(total, ref.parameters()):
            p.grad = t / size
        sgd.step()
    for (name, p), q in zip(net.named_parameters(), ref.parameters()):
        if not torch.allclose(p, q, rtol=1e-5, atol=1e-6):
            print(f"join_worker: rank {rank} (shadowed {joined.shadowed_steps}): '{name}' differs from the reference: "
                  f"{p.flatten()[:4].tolist()} vs {q.flatten()[:4].tolist()}", flush=True)
            return 1
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes()
                                     for p in net.parameters())).hexdigest()[:16]
    print(f"join_worker: ok rank={rank} size={size} shadowed={joined.shadowed_steps} "
          f"digest={digest}", flush=True)
    tandem.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
