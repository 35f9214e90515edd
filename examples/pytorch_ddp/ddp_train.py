"""A plain PyTorch DistributedDataParallel training script that runs on
gloo or on tandem: the backend is a flag, and the only tandem line is the
import that registers it (docs/pytorch-backend.md).

Run (2 workers on this machine; tandem launch sets torchrun's variables):
  build/bin/tandem launch --launcher local -n 2 --no-scheduler -- \\
      /usr/bin/python3 examples/pytorch_ddp/ddp_train.py --backend tandem
or under torchrun (`python3 -m torch.distributed.run --nproc_per_node 2 ...`).

Models: `mlp`, 784-2048-2048-10 (5.8M parameters, 23 MB of gradients: a
step is mostly communication at small batches); `cnn`, the Fashion-MNIST
CNN of examples/fashion_mnist (0.2M parameters: mostly computation). Data
are synthetic (a fixed random batch per rank). Rank 0 prints
"ddp_train: backend=B model=M workers=W batch=N steps=S samples/s=X
step_ms=Y loss=L" over the steps after the warm-up.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(784, 2048)
        self.fc2 = nn.Linear(2048, 2048)
        self.fc3 = nn.Linear(2048, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc3(F.relu(self.fc2(x)))


class Cnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def timed_steps(model, opt, rank: int, batch_size: int, warmup: int, steps: int,
                barrier) -> tuple[float, torch.Tensor]:
    """Trains warmup + steps steps on a fixed random batch of this rank's;
    returns the seconds of the last `steps` (after a barrier) and the last
    loss."""
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(batch_size, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (batch_size,), generator=g)
    start = 0.0
    for step in range(warmup + steps):
        if step == warmup:
            barrier()
            start = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return time.perf_counter() - start, loss


def register_tandem() -> None:
    """import tandem.torch, from where it is installed or else from the
    repository's build/python."""
    try:
        import tandem.torch  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "build" / "python"))
        import tandem.torch  # noqa: F401


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["gloo", "tandem"], default="tandem")
    parser.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    parser.add_argument("--batch-size", type=int, default=8, help="per worker")
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()

    if args.backend == "tandem":
        register_tandem()
    dist.init_process_group(args.backend)  # env://
    rank, workers = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(Mlp() if args.model == "mlp" else Cnn())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    seconds, loss = timed_steps(model, opt, rank, args.batch_size, args.warmup, args.steps,
                                dist.barrier)
    if rank == 0:
        print(f"ddp_train: backend={args.backend} model={args.model} workers={workers} "
              f"batch={args.batch_size} steps={args.steps} "
              f"samples/s={args.steps * args.batch_size * workers / seconds:.1f} "
              f"step_ms={1000 * seconds / args.steps:.1f} loss={loss.item():.4f}", flush=True)
    del model  # before the group: PyTorch 1.13 can deadlock otherwise (docs/pytorch-backend.md)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
