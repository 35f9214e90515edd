"""Samples/s of the main job (examples/fashion_mnist) with 1, 2 and 4 workers
in each mode, and the share of step time spent in communication, as
docs/benchmarks.md ("Training") reports them; plus the same training with
torch.distributed DDP on Gloo (bench/ddp_fashion_mnist.py) as a reference,
in the same run.

Usage: /usr/bin/python3 bench/train_scaling.py [--bin-dir build/bin]
           [--steps 100] [--workers 1,2,4] [--no-ddp]
Prints one Markdown table row per mode and worker count.

Figures are rank 0's: global samples per second of step time (forward,
backward, exchange, optimizer; not the evaluation) and the exchange's share
of it, over the run's steps (the first steps included)."""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DONE = re.compile(r"\[worker 0\] epoch 1/1 done[^:]*: loss ([0-9.]+), (\d+) samples/s, "
                  r"comm ([0-9.]+)% of step time")

MODES = {
    "dist_sync, SGD on servers": (1, ["--kvstore", "dist_sync"], []),
    "dist_sync, SGD on workers": (1, ["--kvstore", "dist_sync", "--optimizer-on-workers"], []),
    "dist_async, SGD on servers": (1, ["--kvstore", "dist_async"], []),
    "allreduce": (0, ["--allreduce"], ["--no-scheduler"]),
}


def run_tandem(bin_dir: Path, mode: str, workers: int, steps: int) -> tuple[float, float]:
    servers, mode_args, launch_args = MODES[mode]
    argv = [str(bin_dir / "tandem"), "launch", "--launcher", "local", "-n", str(workers),
            "-s", str(servers), *launch_args, "--", str(bin_dir / "fashion_mnist_train"),
            *mode_args, "--epochs", "1", "--max-steps", str(steps), "--batch-size", "64",
            "--threads", "1", "--quiet", "--test-limit", "1000"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    m = DONE.search(out.stdout)
    if out.returncode != 0 or not m:
        sys.exit(f"{' '.join(argv)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return float(m.group(2)), float(m.group(3))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddp(workers: int, steps: int) -> float:
    port = free_port()
    procs = []
    for rank in range(workers):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(workers), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(
            ["/usr/bin/python3", str(ROOT / "bench" / "ddp_fashion_mnist.py"), "--steps",
             str(steps), "--batch-size", "64"], env=env, stdout=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    m = re.search(r"ddp: \d+ workers, \d+ steps, (\d+) samples/s", outputs[0])
    if any(p.returncode != 0 for p in procs) or not m:
        sys.exit(f"ddp with {workers} workers failed:\n{outputs}")
    return float(m.group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", type=Path, default=ROOT / "build" / "bin")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--no-ddp", action="store_true")
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    print("| mode | workers | samples/s | comm share of step time |")
    print("|---|---|---|---|")
    for mode in MODES:
        for workers in counts:
            rate, comm = run_tandem(args.bin_dir, mode, workers, args.steps)
            print(f"| {mode} | {workers} | {rate:.0f} | {comm:.1f}% |", flush=True)
    if not args.no_ddp:
        for workers in counts:
            print(f"| torch DDP, Gloo (reference) | {workers} | {run_ddp(workers, args.steps):.0f} "
                  f"| (overlapped with backward) |", flush=True)


if __name__ == "__main__":
    main()
