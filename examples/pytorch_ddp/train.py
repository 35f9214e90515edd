"""The usual PyTorch DistributedDataParallel training script, rewritten for
tandem: a small ResNet-style network on synthetic images, DistributedSampler
for the shards, SGD with momentum.

Where a DDP script has                       this one has
  dist.init_process_group("gloo")              tandem.init()
  model = DDP(model)                           opt = tandem.torch.DistributedOptimizer(opt, ...)
  (DDP broadcasts the weights at wrap time)    tandem.torch.broadcast_parameters(...)
  dist.get_rank() / get_world_size()           tandem.rank() / tandem.size()
  dist.all_reduce(t)                           tandem.allreduce_(t)

Run (collectives, worker 0 hosts the rendezvous):
  build/bin/tandem launch --launcher local -n 2 --no-scheduler -- \
      /usr/bin/python3 examples/pytorch_ddp/train.py
Gradients compressed to float16 on the wire (Horovod's Compression.fp16;
bf16 too, --error-feedback keeps what the rounding lost for the next step;
or --compression powersgd [--powersgd-rank R] for low-rank factors):
  build/bin/tandem launch --launcher local -n 2 --no-scheduler -- \
      /usr/bin/python3 examples/pytorch_ddp/train.py --compression fp16
Through the parameter server instead (gradients pushed, weights pulled):
  build/bin/tandem launch --launcher local -n 2 -s 1 -- \
      /usr/bin/python3 examples/pytorch_ddp/train.py --kvstore dist_sync

The package is imported from where it is installed (`pip install ./python`),
else from the repository's build/python. docs/python.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

try:
    import tandem
except ImportError:  # not installed: the repository's build tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "build" / "python"))
    import tandem
import tandem.torch as tt


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 convolutions and a shortcut."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class SmallResNet(nn.Module):
    def __init__(self, classes: int = 10, width: int = 16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        self.layers = nn.Sequential(BasicBlock(width, width, 1), BasicBlock(width, 2 * width, 2),
                                    BasicBlock(2 * width, 4 * width, 2))
        self.fc = nn.Linear(4 * width, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def synthetic_dataset(samples: int, size: int, classes: int) -> TensorDataset:
    """Images whose class is set by a fixed random linear teacher: learnable,
    and the same on every rank (seeded)."""
    g = torch.Generator().manual_seed(1234)
    images = torch.randn(samples, 3, size, size, generator=g)
    teacher = torch.randn(3 * size * size, classes, generator=g)
    labels = (images.flatten(1) @ teacher).argmax(1)
    return TensorDataset(images, labels)


def train_step(model: nn.Module, optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """One step on the batch (x, y); returns its loss sum, correct answers
    and samples (float64), for the epoch's totals."""
    optimizer.zero_grad()
    out = model(x)
    loss = F.cross_entropy(out, y)
    loss.backward()
    optimizer.step()
    return torch.tensor([loss.item() * len(y), (out.argmax(1) == y).sum().item(), len(y)],
                        dtype=torch.float64)


def add_training_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of the training itself (shared with elastic_train.py)."""
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32, help="per worker")
    ap.add_argument("--lr", type=float, default=0.05, help="for one worker; scaled by workers")
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--image-size", type=int, default=16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_training_arguments(ap)
    ap.add_argument("--kvstore", default=None,
                    help="dist_sync: gradients through the parameter server (needs -s >= 1) "
                         "instead of allreduce")
    ap.add_argument("--compression", default="none",
                    help="none, fp16, bf16 or powersgd: what the gradients travel as "
                         "(allreduce only)")
    ap.add_argument("--powersgd-rank", type=int, default=2,
                    help="with --compression powersgd: the factors' rank")
    ap.add_argument("--powersgd-start", type=int, default=10,
                    help="with --compression powersgd: plain allreduce for this many steps")
    ap.add_argument("--error-feedback", action="store_true",
                    help="with --compression: add what the rounding lost to the next gradient")
    args = ap.parse_args()
    # Checked before anything starts: an unknown name fails here, naming the known ones.
    try:
        if args.compression == "powersgd":
            compression = tt.PowerSGD(rank=args.powersgd_rank, start_iter=args.powersgd_start)
        else:
            compression = tt.Compression.by_name(args.compression)
    except tandem.InvalidArgument as e:
        ap.error(str(e))
    if args.kvstore and args.compression != "none":
        ap.error("--compression applies to the allreduce path; the parameter server's is "
                 "the KVStore's gradient compression (docs/gradient-compression.md)")
    torch.set_num_threads(1)

    kv = None
    if args.kvstore:
        kv = tandem.kvstore.create(args.kvstore)
        rank, world = kv.rank, kv.num_workers
    else:
        tandem.init()
        rank, world = tandem.rank(), tandem.size()

    torch.manual_seed(rank)  # different on purpose: the broadcast makes them equal
    model = SmallResNet()
    # Linear scaling of the learning rate with the number of workers.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * world, momentum=0.9,
                                weight_decay=5e-4)
    if kv is None:
        optimizer = tt.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                            compression=compression,
                                            error_feedback=args.error_feedback)
        tt.broadcast_parameters(model.state_dict(), root_rank=0)  # buffers too (BatchNorm)
        tt.broadcast_optimizer_state(optimizer, root_rank=0)
    else:
        # Initialises every parameter from worker 0 (init + pull).
        optimizer = tt.KVStoreOptimizer(kv, model.named_parameters(), optimizer=optimizer)

    dataset = synthetic_dataset(args.samples, args.image_size, 10)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=7)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        started = time.monotonic()
        totals = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, samples
        for x, y in loader:
            totals += train_step(model, optimizer, x, y)
        seconds = time.monotonic() - started
        if kv is None:
            tandem.allreduce_(totals)  # the epoch's numbers over every worker
        if rank == 0:
            label = "over all workers" if kv is None else "worker 0"
            print(f"epoch {epoch + 1}/{args.epochs}: loss {totals[0] / totals[2]:.4f} "
                  f"train accuracy {100 * totals[1] / totals[2]:.1f}% ({label}), "
                  f"{int(totals[2]) / seconds:.0f} samples/s", flush=True)
    if kv is not None:
        kv.close()
    else:
        tandem.shutdown()


if __name__ == "__main__":
    main()
