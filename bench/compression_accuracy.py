#!/usr/bin/python3
"""Test accuracy after a fixed number of epochs of Fashion-MNIST under each
gradient compressor, beside DDP on Gloo, in one run (docs/benchmarks.md,
"Accuracy of the compressors"): the same model, data order, batch and
hyper-parameters under the variants of bench/compressed_training.py

  ddp-gloo         torch DistributedDataParallel on gloo (the baseline),
  tandem           tandem.torch.DistributedOptimizer, gradients as they are,
  tandem-fp16      ... compression=Compression.fp16,
  tandem-powersgd  ... compression=PowerSGD(rank=R, start_iter=S),
  tandem-2bit      ... compression=TwoBit(threshold=T),
  tandem-1bit      ... compression=OneBit(threshold=T1),

each trained for E epochs by N ranks on this machine (tandem launch; the
link's speed changes a step's time, never its arithmetic, so accuracy is
measured here and samples/s on the bed). Every variant starts from the same
weights (torch.manual_seed(seed) on every rank) and sees the same samples in
the same order: each epoch a permutation drawn from (seed, epoch), rank r
taking the r-th slice of each global batch. After every epoch rank 0
evaluates the 10 000 test images.

Usage:
  /usr/bin/python3 bench/compression_accuracy.py [--workers 4] [--epochs 3] \\
      [--batch-size 32] [--lr 0.01] [--powersgd-rank 4] [--powersgd-start 10] \\
      [--seeds 0,1] [--variants ddp-gloo,tandem,tandem-fp16,tandem-powersgd]
Prints one line per variant, seed and epoch, then a table of the final test
accuracy per variant (mean over the seeds) and its difference from
ddp-gloo's in percentage points.
"""

from __future__ import annotations

import argparse
import gzip
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path("/usr/share/datasets/fashion-mnist")
VARIANTS = ("ddp-gloo", "tandem", "tandem-fp16", "tandem-powersgd", "tandem-2bit",
            "tandem-1bit")
LINE = re.compile(r"compression_accuracy: variant=(\S+) seed=(\d+) epoch=(\d+) "
                  r"test_acc=([0-9.]+) train_loss=([0-9.]+) seconds=([0-9.]+)")
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's training pixels, as the main job normalises


def load(images: str, labels: str):
    """(float images normalised, int64 labels) of one idx pair."""
    import numpy as np
    import torch
    with gzip.open(DATA / images) as f:
        pixels = np.frombuffer(f.read(), dtype=np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(DATA / labels) as f:
        classes = np.frombuffer(f.read(), dtype=np.uint8, offset=8).astype(np.int64)
    x = (torch.from_numpy(pixels.copy()).float() / 255.0 - MEAN) / STD
    return x, torch.from_numpy(classes)


def worker(args: argparse.Namespace) -> None:
    """One rank: args.epochs epochs of the variant, evaluated after each."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    sys.path.insert(0, str(ROOT / "examples" / "pytorch_ddp"))
    sys.path.insert(0, str(ROOT / "build" / "python"))
    from ddp_train import Mlp

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = Mlp()
    sgd = lambda params: torch.optim.SGD(params, lr=args.lr, momentum=0.9)  # noqa: E731
    if args.variant == "ddp-gloo":
        dist.init_process_group("gloo")
        rank, workers = dist.get_rank(), dist.get_world_size()
        net = torch.nn.parallel.DistributedDataParallel(model)
        opt = sgd(net.parameters())
    else:
        import tandem
        import tandem.torch as tt
        tandem.init()
        rank, workers = tandem.rank(), tandem.size()
        compression = {"tandem": tt.Compression.none, "tandem-fp16": tt.Compression.fp16,
                       "tandem-powersgd": tt.PowerSGD(rank=args.powersgd_rank,
                                                      start_iter=args.powersgd_start,
                                                      seed=args.seed),
                       "tandem-2bit": tt.TwoBit(threshold=args.threshold),
                       "tandem-1bit": tt.OneBit(threshold=args.onebit_threshold)}[args.variant]
        net = model
        opt = tt.DistributedOptimizer(sgd(model.parameters()),
                                      named_parameters=model.named_parameters(),
                                      compression=compression)
        tt.broadcast_parameters(model.state_dict(), root_rank=0)
    train_x, train_y = load("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
    test_x, test_y = load("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
    global_batch = args.batch_size * workers
    steps = train_x.shape[0] // global_batch
    start = time.perf_counter()
    for epoch in range(args.epochs):
        order = torch.randperm(train_x.shape[0],
                               generator=torch.Generator().manual_seed(args.seed * 1000 + epoch))
        total = 0.0
        for step in range(steps):
            base = step * global_batch + rank * args.batch_size
            idx = order[base:base + args.batch_size]
            opt.zero_grad()
            loss = F.cross_entropy(net(train_x[idx]), train_y[idx])
            loss.backward()
            opt.step()
            total += loss.item()
        if rank == 0:
            with torch.no_grad():
                correct = sum(int((model(test_x[i:i + 1000]).argmax(1) == test_y[i:i + 1000]).sum())
                              for i in range(0, test_x.shape[0], 1000))
            print(f"compression_accuracy: variant={args.variant} seed={args.seed} "
                  f"epoch={epoch + 1} test_acc={100.0 * correct / test_x.shape[0]:.2f} "
                  f"train_loss={total / steps:.4f} seconds={time.perf_counter() - start:.1f}",
                  flush=True)
    if args.variant == "ddp-gloo":
        dist.barrier()
        del net  # before the group (docs/pytorch-backend.md)
        dist.destroy_process_group()
    else:
        import tandem
        tandem.barrier()
        tandem.shutdown()


def run(args: argparse.Namespace, variant: str, seed: int) -> list[tuple[int, float, float]]:
    """(epoch, test accuracy %, mean training loss) of one job."""
    argv = [str(args.bin_dir / "tandem"), "launch", "--launcher", "local", "-n",
            str(args.workers), "--no-scheduler", "--", "/usr/bin/python3",
            str(Path(__file__).resolve()), "--worker", "--variant", variant, "--seed", str(seed),
            "--epochs", str(args.epochs), "--batch-size", str(args.batch_size), "--lr",
            str(args.lr), "--powersgd-rank", str(args.powersgd_rank), "--powersgd-start",
            str(args.powersgd_start), "--threshold", str(args.threshold),
            "--onebit-threshold", str(args.onebit_threshold)]
    env = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(args.bin_dir.parent / "python")}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=6 * 3600)
    got = [(int(m.group(3)), float(m.group(4)), float(m.group(5)))
           for m in LINE.finditer(proc.stdout)]
    if proc.returncode != 0 or len(got) != args.epochs:
        sys.exit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    for line in LINE.finditer(proc.stdout):
        print(line.group(0), flush=True)
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin-dir", type=Path, default=ROOT / "build" / "bin")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--powersgd-rank", type=int, default=4)
    parser.add_argument("--threshold", type=float, default=0.001,
                        help="tandem-2bit: TwoBit's threshold (about the mean |gradient| of "
                             "the MLP's large layers)")
    parser.add_argument("--onebit-threshold", type=float, default=0.0,
                        help="tandem-1bit: OneBit's threshold, which only picks the sign "
                             "(values travel as +1 and -1)")
    parser.add_argument("--powersgd-start", type=int, default=10)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    variants = args.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            parser.error(f"unknown variant {v!r}: one of {', '.join(VARIANTS)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    final: dict[str, list[float]] = {v: [] for v in variants}
    loss: dict[str, list[float]] = {v: [] for v in variants}
    for seed in seeds:
        for v in variants:
            got = run(args, v, seed)
            final[v].append(got[-1][1])
            loss[v].append(got[-1][2])
    print(f"# mlp, {args.workers} ranks, batch {args.batch_size} per rank, lr {args.lr}, "
          f"momentum 0.9, {args.epochs} epochs, seeds {args.seeds}; PowerSGD rank "
          f"{args.powersgd_rank} from step {args.powersgd_start}")
    print("| variant | test accuracy % (per seed) | mean | vs ddp-gloo (pp) | last epoch's loss |")
    print("|---|---|---|---|---|")
    base = statistics.mean(final["ddp-gloo"]) if "ddp-gloo" in final else None
    for v in variants:
        mean = statistics.mean(final[v])
        diff = f"{mean - base:+.2f}" if base is not None else "-"
        per = ", ".join(f"{a:.2f}" for a in final[v])
        print(f"| {v} | {per} | {mean:.2f} | {diff} | {statistics.mean(loss[v]):.4f} |",
              flush=True)


if __name__ == "__main__":
    main()
