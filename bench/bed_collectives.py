#!/usr/bin/python3
"""Allreduce on the multi-host bed (tests/system/netbed.py), tandem beside
Open MPI on the same bed, alternating: tandem's ranks (--ranks-per-host
of them on each host) under the torchrun contract, and mpirun starting its daemons on the hosts over the
bed's sshd (tests/system/ssh_bed.py, `plm_rsh_agent`). Prints the median
time and busbw per size of every variant. Needs root (network namespaces);
removes the bed afterwards however the run ends. docs/benchmarks.md, "The
TCP path".

  /usr/bin/python3 bench/bed_collectives.py --hosts 4 --rate 1gbit --rounds 3 \\
      --variant default:TANDEM_COLLECTIVE_SAME_HOST_COPY=0 \\
      --variant rd:TANDEM_COLLECTIVE_SAME_HOST_COPY=0,TANDEM_ALLREDUCE_ALGORITHM=recursive_doubling

The bed's hosts share one kernel, so a tandem variant should say
TANDEM_COLLECTIVE_SAME_HOST_COPY=0, or its pieces skip the network; with
--ranks-per-host above 1, TANDEM_COLLECTIVE_SAME_HOST_COPY=host lets the
ranks of one namespace share memory, as ranks of one real host do.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "system"))

import netbed  # noqa: E402
from ssh_bed import SshBed  # noqa: E402

ROW = re.compile(r"^\s+(\d+)\s+\d+\s+\S+\s+\S+\s+([\d.]+)\s+[\d.]+\s+([\d.]+)")


def parse_rows(text: str) -> dict[int, tuple[float, float]]:
    """size -> (time in µs, busbw in GB/s) from a benchmark's table."""
    out = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            out[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
    return out


def run_tandem(bed: netbed.NetBed, bench: list[str], env: dict[str, str],
               timeout: float, per_host: int) -> dict[int, tuple[float, float]]:
    secret = secrets.token_hex(32)
    procs = []
    world = len(bed.hosts) * per_host
    for h in bed.hosts:
        for local in range(per_host):
            full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TANDEM_SECRET": secret,
                    "RANK": str((h.index - 1) * per_host + local), "WORLD_SIZE": str(world),
                    "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(per_host),
                    "MASTER_ADDR": bed.hosts[0].name, "MASTER_PORT": "29500", **env}
            procs.append(bed.popen(h, bench, env=full, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
    for p, out in zip(procs, outs):
        if p.returncode != 0:
            raise RuntimeError(f"a tandem rank exited {p.returncode}:\n{out}")
    return parse_rows(outs[0])


def run_mpi(bed: netbed.NetBed, ssh: SshBed, bench: list[str],
            timeout: float, per_host: int) -> dict[int, tuple[float, float]]:
    agent = " ".join(["ssh", *[a.split("=", 1)[1] for a in ssh.ssh_args()]])
    cmd = ["mpirun", "--allow-run-as-root", "-n", str(len(bed.hosts) * per_host),
           "-H", ",".join(f"{h.name}:{per_host}" for h in bed.hosts), "--bind-to", "none",
           "--mca", "plm_rsh_agent", agent, "--mca", "oob_tcp_if_include", "eth0",
           "--mca", "btl_tcp_if_include", "eth0", "--mca", "btl", "self,tcp",
           "--mca", "mpi_yield_when_idle", "1", *bench]
    r = bed.run(1, cmd, timeout=timeout, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    return parse_rows(r.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", type=Path, default=ROOT / "build" / "bin")
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--ranks-per-host", type=int, default=1,
                    help="ranks on each host (tandem's ranks and Open MPI's fill a host "
                         "before the next)")
    ap.add_argument("--min-bytes", type=int, default=4096)
    ap.add_argument("--max-bytes", type=int, default=1 << 20)
    ap.add_argument("--factor", type=int, default=4)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL:K=V,...",
                    help="a tandem run with this environment (repeatable)")
    ap.add_argument("--no-mpi", action="store_true", help="leave Open MPI out")
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args()
    sizes = ["--op", "allreduce", "--min-bytes", str(a.min_bytes), "--max-bytes",
             str(a.max_bytes), "--factor", str(a.factor), "--iters", str(a.iters),
             "--warmup", str(a.warmup)]
    variants = []
    for v in a.variant or ["default:TANDEM_COLLECTIVE_SAME_HOST_COPY=0"]:
        label, _, assignments = v.partition(":")
        env = dict(kv.split("=", 1) for kv in assignments.split(",") if kv)
        variants.append((f"tandem_{label}", env))
    results: dict[str, dict[int, list[tuple[float, float]]]] = {}
    with netbed.NetBed(a.hosts, rate=a.rate) as bed, tempfile.TemporaryDirectory() as workdir:
        ssh = None if a.no_mpi else SshBed(bed, Path(workdir))
        for r in range(a.rounds):
            runs = [(label, lambda env=env: run_tandem(bed, [str(a.bin / "collective_bench"),
                                                            *sizes], env, a.timeout,
                                                     a.ranks_per_host))
                    for label, env in variants]
            if ssh is not None:
                runs.append(("openmpi_tcp", lambda: run_mpi(
                    bed, ssh, [str(a.bin / "mpi_collective_bench"), *sizes], a.timeout,
                    a.ranks_per_host)))
            for label, run in runs:
                rows = run()
                for size, value in rows.items():
                    results.setdefault(label, {}).setdefault(size, []).append(value)
                print(f"# round {r + 1}: {label}, {len(rows)} sizes", flush=True)
    labels = list(results)
    print(f"# allreduce, {a.hosts} hosts at {a.rate}, {a.ranks_per_host} rank(s) each; "
          f"median of {a.rounds} "
          f"round(s) of {a.iters}: time µs / busbw GB/s")
    print("| size | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    for size in sorted(results[labels[0]]):
        cells = []
        for label in labels:
            values = results[label].get(size, [])
            if not values:
                cells.append("—")
                continue
            t = statistics.median(v[0] for v in values)
            b = statistics.median(v[1] for v in values)
            cells.append(f"{t:.1f} / {b:.3g}")
        print(f"| {size} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
