"""An unchanged torch.distributed script (no tandem import): env:// with
Gloo, one allreduce of RANK + 1 and a DDP step, then its numbers in one
line that the test checks exactly."""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank, size = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 1, bias=False))
    # Rank r's input is all (r + 1): the averaged gradient of sum(out) is the
    # mean of the inputs, the same on every rank.
    model(torch.full((1, 4), float(rank + 1))).sum().backward()
    grad = model.module.weight.grad[0, 0].item()
    print(f"ddp: rank={rank} size={size} local_rank={os.environ['LOCAL_RANK']} "
          f"local_size={os.environ['LOCAL_WORLD_SIZE']} group_rank={os.environ['GROUP_RANK']} "
          f"sum={t.item():g} grad={grad:g}", flush=True)
    # The model goes first: destroyed after the group, DDP's reducer drops
    # the last reference to Gloo's group while holding the GIL, and PyTorch
    # 1.13 can deadlock there (docs/pytorch-backend.md, "Known problems").
    del model
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
