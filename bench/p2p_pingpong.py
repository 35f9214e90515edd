"""Point-to-point through torch.distributed: a ping-pong between two ranks
(rank 0 sends, rank 1 sends the tensor back) on gloo and on tandem's
backend, side by side in one run: the same two processes hold a tandem
default group and a gloo group over the same ranks, and the backends
alternate for every size (docs/benchmarks.md, "torch.distributed
send/recv").

Usage: /usr/bin/python3 bench/p2p_pingpong.py [--bin-dir build/bin]
           [--sizes 4,4096,65536,1048576,16777216] [--iters 200] [--rounds 3]

It runs itself under `tandem launch -n 2 --no-scheduler`. The table gives,
per size and backend, the median over rounds of the one-way time (half a
round trip) and the bandwidth that time gives (bytes / one-way time).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_way_seconds(dist, group, rank: int, tensor, iters: int) -> float:
    peer = 1 - rank
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(iters):
        if rank == 0:
            dist.send(tensor, peer, group=group)
            dist.recv(tensor, peer, group=group)
        else:
            dist.recv(tensor, peer, group=group)
            dist.send(tensor, peer, group=group)
    return (time.perf_counter() - start) / (2 * iters)


def rank_main(sizes: list[int], iters: int, rounds: int) -> None:
    import torch
    import torch.distributed as dist
    import tandem.torch  # noqa: F401  (registers the backend)

    dist.init_process_group("tandem")
    rank = dist.get_rank()
    groups = {"tandem": None, "gloo": dist.new_group([0, 1], backend="gloo")}
    results: dict[tuple[int, str], list[float]] = {}
    for size in sizes:
        tensor = torch.zeros(max(size // 4, 1), dtype=torch.float32)
        n = max(iters * 4096 // max(size, 4096), 5)  # fewer round trips for large sizes
        for group in groups.values():
            one_way_seconds(dist, group, rank, tensor, 3)  # warm-up
        for _ in range(rounds):
            for name, group in groups.items():
                results.setdefault((size, name), []).append(
                    one_way_seconds(dist, group, rank, tensor, n))
    if rank == 0:
        print(f"{'bytes':>10} {'gloo us':>10} {'tandem us':>10} {'gloo GB/s':>10} "
              f"{'tandem GB/s':>12} {'gloo/tandem':>12}")
        for size in sizes:
            g = statistics.median(results[(size, "gloo")])
            t = statistics.median(results[(size, "tandem")])
            print(f"{size:>10} {g * 1e6:>10.1f} {t * 1e6:>10.1f} {size / g / 1e9:>10.3f} "
                  f"{size / t / 1e9:>12.3f} {g / t:>11.2f}x", flush=True)
    del groups
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", default=str(ROOT / "build" / "bin"))
    parser.add_argument("--sizes", default="4,4096,65536,1048576,16777216")
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.rank_main:
        rank_main(sizes, args.iters, args.rounds)
        return
    bin_dir = Path(args.bin_dir).resolve()
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(bin_dir.parent / "python"),
           "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo")}
    argv = [str(bin_dir / "tandem"), "launch", "-n", "2", "--no-scheduler", "--",
            "/usr/bin/python3", str(Path(__file__).resolve()), "--rank-main", "--sizes",
            args.sizes, "--iters", str(args.iters), "--rounds", str(args.rounds)]
    sys.exit(subprocess.run(argv, env=env).returncode)


if __name__ == "__main__":
    main()
