"""A worker of tests/system/test_python_call_checks.py: makes one call that the
ranks disagree on (the case named by --case), through tandem.* on NumPy
arrays or through tandem.torch, and prints what happened:

    mismatch_worker: rank R raised CallMismatch after S s: MESSAGE
    mismatch_worker: rank R returned          (a wrong answer: the test fails)

then waits a moment (so that a rank that exits cannot hide the others'
answers) and exits 0.

    mismatch_worker.py --case NAME
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time

import numpy as np

import tandem


def f32(n):
    return np.ones(n, dtype=np.float32)


def case_dtype(rank, size):
    t = np.ones(10, dtype=np.float32 if rank == 0 else np.int32)
    tandem.allreduce_(t, name="layer3.weight")


def case_order(rank, size):
    a, b = f32(4), f32(4)
    first, second = ((a, "a"), (b, "b")) if rank == 0 else ((b, "b"), (a, "a"))
    tandem.allreduce_(first[0], name=first[1])
    tandem.allreduce_(second[0], name=second[1])


def case_root(rank, size):
    tandem.broadcast_(f32(6), rank, name="w")


def case_reduction(rank, size):
    tandem.allreduce_(np.ones(5, dtype=np.float64), "max" if rank == 0 else "sum")


def case_count(rank, size):
    tandem.allreduce_(f32(10 if rank == 0 else 12), name="grad")


def case_allgather_trailing(rank, size):
    tandem.allgather(np.ones((2, 3 if rank == 0 else 4), dtype=np.float32), name="features")


def case_alltoall_block(rank, size):
    tandem.alltoall(np.ones(size * (2 if rank == 0 else 3), dtype=np.int64))


def case_reduce_scatter_count(rank, size):
    tandem.reduce_scatter(np.ones(size * (2 if rank == 0 else 5), dtype=np.float32))


def case_crossed_groups(rank, size):
    group = tandem.new_group([0, 1, 2]) if rank < 3 else None
    tandem.barrier()
    if rank < 2:
        tandem.allreduce_(f32(8), group=group)
    else:
        tandem.allreduce_(f32(8))


def case_torch_model(rank, size):
    # Rank 0's model has a wider hidden layer: DistributedOptimizer's first
    # gradient reductions disagree in shape.
    import torch
    import tandem.torch as tt
    hidden = 17 if rank == 0 else 16
    model = torch.nn.Sequential(torch.nn.Linear(10, hidden), torch.nn.Tanh(),
                                torch.nn.Linear(hidden, 3))
    opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  named_parameters=model.named_parameters())
    loss = model(torch.randn(8, 10)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()


def case_torch_compression(rank, size):
    # Rank 0 compresses its gradients to float16, the others do not.
    import torch
    import tandem.torch as tt
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  named_parameters=model.named_parameters(),
                                  compression="fp16" if rank == 0 else "none")
    loss = model(torch.randn(8, 10)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()


def case_torch_broadcast_parameters(rank, size):
    import torch
    import tandem.torch as tt
    model = torch.nn.Linear(10, 4 if rank == 0 else 5)
    tt.broadcast_parameters(model.state_dict(), root_rank=0)


CASES = {name[len("case_"):]: f for name, f in globals().items() if name.startswith("case_")}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", required=True, choices=sorted(CASES))
    args = parser.parse_args()
    if args.case.startswith("torch_"):
        importlib.import_module("tandem.torch")  # before the clock starts
    tandem.init()
    rank, size = tandem.rank(), tandem.size()
    tandem.barrier()
    start = time.monotonic()
    try:
        CASES[args.case](rank, size)
        print(f"mismatch_worker: rank {rank} returned", flush=True)
    except tandem.CallMismatch as e:
        print(f"mismatch_worker: rank {rank} raised CallMismatch after "
              f"{time.monotonic() - start:.3f} s: {e}", flush=True)
    except tandem.Error as e:
        print(f"mismatch_worker: rank {rank} raised {type(e).__name__} after "
              f"{time.monotonic() - start:.3f} s: {e}", flush=True)
    time.sleep(1.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
