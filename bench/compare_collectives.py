#!/usr/bin/python3
"""Runs tandem's collective benchmark and its peers (Gloo, OpenMPI) on the
same sizes and group size, alternating, and prints one table: per size each
implementation's bus bandwidth and the ratio tandem / best peer.

Every implementation is a command that prints one JSON object per size
(bench/peers/collective_report.h describes the fields), e.g.

  {"impl":"gloo_ring","op":"allreduce","ranks":4,"bytes":4096,"count":1024,
   "dtype":"float32","time_us":697.3,"algbw":0.0059,"busbw":0.0088,"wrong":0}

Lines may carry a prefix (`tandem launch` prefixes "[worker 0] "); anything
that is not such an object is ignored. A run whose objects report wrong
elements fails the comparison.

Usage (docs/benchmarks.md, "Collective peers"):

  /usr/bin/python3 bench/compare_collectives.py --bin build/bin --ranks 4 \\
      --min-bytes 4K --max-bytes 64M --factor 4 --rounds 3 \\
      [--tandem-cmd "{bin}/tandem launch -n {ranks} -s 0 -- {bin}/collective_bench \\
                     --op {op} --min-bytes {min_bytes} --max-bytes {max_bytes} \\
                     --factor {factor} --iters {iters} --warmup {warmup} --json"]

The template's fields: {bin} {ranks} {op} {min_bytes} {max_bytes} {factor}
{iters} {warmup} (sizes in bytes). Without --tandem-cmd only the peers run.
`--variant LABEL:K=V,K=V` (repeatable) runs the tandem command once per
variant with that environment, as column tandem_LABEL, e.g.
`--variant tcp:TANDEM_COLLECTIVE_SAME_HOST_COPY=0 --variant copy:`; every
tandem column gets its ratio to the best TCP peer, and to OpenMPI's shared
memory when that peer ran.
Peers missing from --bin (not built) or without mpirun are reported and
skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

GLOO_ALGOS = {
    "gloo_ring": "ring",
    "gloo_ring_chunked": "ring_chunked",
    "gloo_halving_doubling": "halving_doubling",
    "gloo_allreduce_ring": "allreduce_ring",
}
MPI_BTLS = {"openmpi_tcp": "self,tcp", "openmpi_shm": "self,vader"}
ALL_PEERS = list(GLOO_ALGOS) + list(MPI_BTLS)
# Peers that speak TCP: the ratio is taken against the best of these
# (tandem's targets are stated against TCP peers; shared memory is shown
# for reference).
TCP_PEERS = list(GLOO_ALGOS) + ["openmpi_tcp"]


def parse_bytes(text: str) -> int:
    units = {"": 1, "B": 1, "K": 1 << 10, "KIB": 1 << 10, "KB": 1 << 10, "M": 1 << 20,
             "MIB": 1 << 20, "MB": 1 << 20, "G": 1 << 30, "GIB": 1 << 30, "GB": 1 << 30}
    digits = text.rstrip("KMGBkmgbiI")
    unit = text[len(digits):].upper()
    if not digits.isdigit() or unit not in units:
        raise argparse.ArgumentTypeError(f"cannot parse the size {text!r}")
    return int(digits) * units[unit]


def human(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def peer_command(name: str, a: argparse.Namespace) -> list[str] | None:
    """The argv of peer `name`, or None (with a note) when it cannot run here."""
    sizes = ["--min-bytes", str(a.min_bytes), "--max-bytes", str(a.max_bytes), "--factor",
             str(a.factor), "--iters", str(a.iters), "--warmup", str(a.warmup), "--json"]
    if name in GLOO_ALGOS:
        if a.op != "allreduce":
            print(f"# {name}: skipped (the Gloo peer measures allreduce only)", file=sys.stderr)
            return None
        exe = a.bin / "gloo_collective_bench"
        if not exe.is_file():
            print(f"# {name}: skipped ({exe} not built: libgloo-dev missing?)", file=sys.stderr)
            return None
        return [str(exe), "--ranks", str(a.ranks), "--algo", GLOO_ALGOS[name]] + sizes
    exe = a.bin / "mpi_collective_bench"
    mpirun = shutil.which("mpirun")
    if not exe.is_file() or mpirun is None:
        print(f"# {name}: skipped (mpi_collective_bench or mpirun missing: libopenmpi-dev, "
              "openmpi-bin)", file=sys.stderr)
        return None
    cmd = [mpirun, "-n", str(a.ranks), "--oversubscribe", "--bind-to", "none",
           "--mca", "btl", MPI_BTLS[name],
           # Loopback only, and yield when ranks outnumber cores (BENCHMARKING.md).
           "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo",
           "--mca", "mpi_yield_when_idle", "1"]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    return cmd + [str(exe), "--op", a.op, "--impl", name] + sizes


def tandem_command(a: argparse.Namespace) -> list[str]:
    text = a.tandem_cmd.format(bin=a.bin, ranks=a.ranks, op=a.op, min_bytes=a.min_bytes,
                               max_bytes=a.max_bytes, factor=a.factor, iters=a.iters,
                               warmup=a.warmup)
    return shlex.split(text)


def json_objects(output: str) -> list[dict]:
    """Every result object in `output`, whatever prefix its line has."""
    found = []
    for line in output.splitlines():
        start = line.find("{")
        if start < 0:
            continue
        try:
            obj = json.loads(line[start:])
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and {"impl", "bytes", "busbw", "time_us"} <= obj.keys():
            found.append(obj)
    return found


def run(label: str, argv: list[str], timeout: float) -> list[dict]:
    print(f"# running {label}: {shlex.join(argv)}", file=sys.stderr)
    started = time.monotonic()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    objs = json_objects(proc.stdout)
    if proc.returncode != 0 or not objs:
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-4000:])
        raise SystemExit(f"{label} failed (exit {proc.returncode}, {len(objs)} results)")
    wrong = [o for o in objs if o.get("wrong", 0)]
    if wrong:
        raise SystemExit(f"{label} computed wrong results: {wrong}")
    print(f"# {label}: {len(objs)} sizes in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return objs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", type=Path, default=Path("build/bin"), help="the build's bin/")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--op", default="allreduce",
                   choices=["allreduce", "broadcast", "allgather", "reduce_scatter"])
    p.add_argument("--min-bytes", type=parse_bytes, default=4096)
    p.add_argument("--max-bytes", type=parse_bytes, default=64 << 20)
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=int, default=1,
                   help="times every implementation runs, alternating; the table shows medians")
    p.add_argument("--peers", default=",".join(ALL_PEERS),
                   help=f"comma-separated subset of {','.join(ALL_PEERS)}")
    p.add_argument("--tandem-cmd", default=None, help="command template printing tandem's JSON")
    p.add_argument("--variant", action="append", default=[], metavar="LABEL:K=V,...",
                   help="run the tandem command with this environment as tandem_LABEL")
    p.add_argument("--timeout", type=float, default=900, help="seconds per run")
    p.add_argument("--json-out", type=Path, default=None, help="also write every result here")
    a = p.parse_args()

    commands: dict[str, list[str]] = {}
    if a.tandem_cmd and not a.variant:
        commands["tandem"] = tandem_command(a)
    for v in a.variant:
        if not a.tandem_cmd:
            p.error("--variant needs --tandem-cmd")
        label, _, assignments = v.partition(":")
        env = [x for x in assignments.split(",") if x]
        if not label or any("=" not in x for x in env):
            p.error(f"--variant takes LABEL:K=V,K=V, got {v!r}")
        commands[f"tandem_{label}"] = ["env"] + env + tandem_command(a)
    for name in [n for n in a.peers.split(",") if n]:
        if name not in ALL_PEERS:
            p.error(f"unknown peer {name!r}; known: {', '.join(ALL_PEERS)}")
        cmd = peer_command(name, a)
        if cmd is not None:
            commands[name] = cmd
    if not commands:
        raise SystemExit("nothing to run: no peer is built and no --tandem-cmd was given")

    # results[label][bytes] = list of result objects, one per round.
    results: dict[str, dict[int, list[dict]]] = {label: {} for label in commands}
    order = list(commands)
    for r in range(a.rounds):
        # Alternate which implementation goes first, so that none always
        # meets the machine in the same state.
        rotated = order[r % len(order):] + order[:r % len(order)]
        for label in rotated:
            for obj in run(label, commands[label], a.timeout):
                results[label].setdefault(int(obj["bytes"]), []).append(obj)

    if a.json_out:
        with open(a.json_out, "w") as f:
            for label in results:
                for objs in results[label].values():
                    for obj in objs:
                        f.write(json.dumps(dict(obj, label=label)) + "\n")

    def median(label: str, size: int, field: str) -> float | None:
        objs = results[label].get(size)
        return statistics.median(o[field] for o in objs) if objs else None

    sizes = sorted({s for per in results.values() for s in per})
    labels = order
    print(f"# {a.op}, {a.ranks} ranks, loopback; busbw in GB/s (nccl-tests' definition), "
          f"median of {a.rounds} round(s) of {a.iters} iterations")
    header = ["size"] + labels
    tcp_peers = [l for l in labels if l in TCP_PEERS]
    tandems = [l for l in labels if l == "tandem" or l.startswith("tandem_")]
    shm = "openmpi_shm" if "openmpi_shm" in labels else None
    if tandems and tcp_peers:
        header += ["best TCP peer"] + [f"{t}/best TCP" for t in tandems]
    if tandems and shm:
        header += [f"{t}/{shm}" for t in tandems]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))

    def ratio(t: float | None, peer: float | None) -> str:
        return f"{t / peer:.2f}" if t is not None and peer else "—"

    for size in sizes:
        row = [human(size)]
        for label in labels:
            v = median(label, size, "busbw")
            row.append("—" if v is None else f"{v:.3g}")
        if tandems and tcp_peers:
            peer_values = [(median(l, size, "busbw"), l) for l in tcp_peers]
            peer_values = [(v, l) for v, l in peer_values if v is not None]
            best, best_label = max(peer_values) if peer_values else (None, "")
            row.append(f"{best:.3g} ({best_label})" if best is not None else "—")
            row += [ratio(median(t, size, "busbw"), best) for t in tandems]
        if tandems and shm:
            row += [ratio(median(t, size, "busbw"), median(shm, size, "busbw")) for t in tandems]
        print("| " + " | ".join(row) + " |")
    print()
    print("# time per operation, µs (median; slowest rank per iteration)")
    print("| " + " | ".join(["size"] + labels) + " |")
    print("|" + "---|" * (len(labels) + 1))
    for size in sizes:
        row = [human(size)]
        for label in labels:
            v = median(label, size, "time_us")
            row.append("—" if v is None else f"{v:.1f}")
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
