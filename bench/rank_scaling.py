#!/usr/bin/python3
"""Many ranks on one host: the same collective benchmark at several rank
counts (4, 8 and 16 by default), one table of busbw per size and rank
count, each rank count's busbw as a share of the first's, and the
smallest size's time. Rank counts alternate within each round; the table
holds the median over rounds. docs/benchmarks.md, "Many ranks on one host".

  /usr/bin/python3 bench/rank_scaling.py --bin build/bin --ranks 4,8,16 \\
      --min-bytes 4096 --max-bytes 67108864 --factor 16 --rounds 3

--env K=V (repeatable) sets a variable for every rank, e.g.
TANDEM_COLLECTIVE_SAME_HOST_COPY=0 for the TCP path.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(a: argparse.Namespace, ranks: int, env: dict[str, str]) -> dict[int, tuple[float, float]]:
    """size -> (time in µs, busbw in GB/s) of one job of `ranks` ranks."""
    cmd = [str(a.bin / "tandem"), "launch", "-n", str(ranks), "-s", "0", "--",
           str(a.bin / "collective_bench"), "--op", a.op, "--min-bytes", str(a.min_bytes),
           "--max-bytes", str(a.max_bytes), "--factor", str(a.factor), "--iters", str(a.iters),
           "--warmup", str(a.warmup), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout,
                          env={**os.environ, **env})
    if proc.returncode != 0:
        raise RuntimeError(f"{ranks} ranks: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    rows = {}
    for line in proc.stdout.splitlines():
        if not line.startswith("[worker 0] {"):
            continue
        obj = json.loads(line[len("[worker 0] "):])
        if obj.get("wrong", 0):
            raise RuntimeError(f"{ranks} ranks: wrong results at {obj['bytes']} bytes")
        rows[int(obj["bytes"])] = (float(obj["time_us"]), float(obj["busbw"]))
    if not rows:
        raise RuntimeError(f"{ranks} ranks: no results\n{proc.stdout}")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", type=Path, default=ROOT / "build" / "bin")
    ap.add_argument("--op", default="allreduce",
                    choices=["allreduce", "broadcast", "allgather", "reduce_scatter"])
    ap.add_argument("--ranks", default="4,8,16", help="rank counts, comma-separated")
    ap.add_argument("--min-bytes", type=int, default=4096)
    ap.add_argument("--max-bytes", type=int, default=64 << 20)
    ap.add_argument("--factor", type=int, default=16)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--env", action="append", default=[], metavar="K=V")
    ap.add_argument("--timeout", type=float, default=900)
    a = ap.parse_args()
    counts = [int(x) for x in a.ranks.split(",") if x]
    env = dict(kv.split("=", 1) for kv in a.env)
    results: dict[int, dict[int, list[tuple[float, float]]]] = {n: {} for n in counts}
    for r in range(a.rounds):
        for n in counts:
            for size, value in run(a, n, env).items():
                results[n].setdefault(size, []).append(value)
            print(f"# round {r + 1}: {n} ranks", flush=True)
    first = counts[0]
    sizes = sorted(results[first])
    med = {n: {s: (statistics.median(v[0] for v in results[n][s]),
                   statistics.median(v[1] for v in results[n][s]))
               for s in sizes if s in results[n]} for n in counts}
    print(f"# {a.op}, {os.cpu_count()} cores, median of {a.rounds} round(s) of {a.iters}"
          f"{', ' + ' '.join(a.env) if a.env else ''}: busbw GB/s (share of {first} ranks')")
    print("| size | " + " | ".join(f"{n} ranks" for n in counts) + " |")
    print("|---|" + "---|" * len(counts))
    for s in sizes:
        cells = []
        for n in counts:
            if s not in med[n]:
                cells.append("—")
                continue
            b = med[n][s][1]
            base = med[first][s][1]
            share = f" ({100 * b / base:.0f}%)" if n != first and base > 0 else ""
            cells.append(f"{b:.3g}{share}")
        print(f"| {s} | " + " | ".join(cells) + " |")
    smallest = sizes[0]
    print(f"# {smallest} bytes, time µs: " +
          ", ".join(f"{n} ranks {med[n][smallest][0]:.1f}" for n in counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
