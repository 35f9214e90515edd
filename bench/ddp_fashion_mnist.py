"""The reference point of bench/train_scaling.py: the main job's training
(examples/fashion_mnist: the same CNN, SGD with momentum, batch B per
worker, the same normalisation) written with torch.distributed's
DistributedDataParallel on the Gloo backend, under Debian's python3-torch.

Usage (one process per rank; bench/train_scaling.py starts them):
  MASTER_ADDR=127.0.0.1 MASTER_PORT=P RANK=r WORLD_SIZE=W \
      /usr/bin/python3 bench/ddp_fashion_mnist.py --steps 100 --batch-size 64
Rank 0 prints "ddp: W workers, N steps, S samples/s" (global samples over the
timed steps, after 5 warm-up steps)."""

from __future__ import annotations

import argparse
import gzip
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
LABELS = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz"


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    with gzip.open(DATA) as f:
        pixels = np.frombuffer(f.read(), dtype=np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(LABELS) as f:
        labels = np.frombuffer(f.read(), dtype=np.uint8, offset=8).astype(np.int64)
    images = torch.from_numpy(pixels.copy())
    targets = torch.from_numpy(labels)
    torch.manual_seed(42)
    model = nn.parallel.DistributedDataParallel(Cnn())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    order = torch.randperm(images.shape[0], generator=torch.Generator().manual_seed(0))
    global_batch = args.batch_size * world
    warmup = 5
    start = 0.0
    for step in range(args.steps + warmup):
        if step == warmup:
            dist.barrier()
            start = time.perf_counter()
        base = (step * global_batch) % (images.shape[0] - global_batch)
        idx = order[base + rank * args.batch_size: base + (rank + 1) * args.batch_size]
        x = (images[idx].float() / 255.0 - 0.2860) / 0.3530
        opt.zero_grad()
        loss = F.cross_entropy(model(x), targets[idx])
        loss.backward()
        opt.step()
    dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        print(f"ddp: {world} workers, {args.steps} steps, "
              f"{args.steps * global_batch / seconds:.0f} samples/s, loss {loss.item():.4f}",
              flush=True)
    del model  # before the group: PyTorch 1.13 can deadlock otherwise (docs/pytorch-backend.md)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main()
