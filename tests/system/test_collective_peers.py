"""The collective benchmark's peers (bench/peers/, docs/benchmarks.md
"Collective peers"): each Gloo algorithm and each MPI collective runs on a
few small sizes, passes its correctness pass (inputs rank+1, results in
closed form) and prints the JSON that bench/compare_collectives.py reads,
with nccl-tests' bus bandwidth. Skipped where a peer is not built."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUSBW_FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
                "reduce_scatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0}
SIZES = [4096, 16384, 65536]
COMMON = ["--min-bytes", "4K", "--max-bytes", "64K", "--factor", "4", "--iters", "3",
          "--warmup", "1", "--json"]


def results(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def check(objs: list[dict], impl: str, op: str, ranks: int):
    assert [o["bytes"] for o in objs] == SIZES, objs
    for o in objs:
        assert o["impl"] == impl and o["op"] == op and o["ranks"] == ranks, o
        assert o["wrong"] == 0, o
        assert o["dtype"] == "float32" and o["count"] * 4 == o["bytes"], o
        assert o["time_us"] > 0 and o["time_p90_us"] >= o["time_us"], o
        assert o["algbw"] == pytest.approx(o["bytes"] / (o["time_us"] * 1e3), rel=1e-3), o
        assert o["busbw"] == pytest.approx(o["algbw"] * BUSBW_FACTOR[op](ranks), rel=1e-3), o


def peer(tandem_bin_dir: Path, name: str) -> Path:
    exe = tandem_bin_dir / name
    if not exe.is_file():
        pytest.skip(f"{name} not built (its library is not installed)")
    return exe


@pytest.mark.parametrize("ranks", [2, 3, 4])
@pytest.mark.parametrize("algo", ["ring", "ring_chunked", "halving_doubling", "allreduce_ring"])
def test_gloo_peer_is_correct_and_reports_nccl_tests_figures(tandem_bin_dir, algo, ranks):
    exe = peer(tandem_bin_dir, "gloo_collective_bench")
    proc = subprocess.run([exe, "--ranks", str(ranks), "--algo", algo, "--timeout", "60"] + COMMON,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    check(results(proc.stdout), f"gloo_{algo}", "allreduce", ranks)


def mpirun_argv(ranks: int) -> list[str]:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not installed (openmpi-bin)")
    argv = [mpirun, "-n", str(ranks), "--oversubscribe", "--bind-to", "none", "--mca", "btl",
            "self,tcp", "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo",
            "--mca", "mpi_yield_when_idle", "1"]
    if os.geteuid() == 0:
        argv.insert(1, "--allow-run-as-root")
    return argv


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("op", ["allreduce", "broadcast", "allgather", "reduce_scatter"])
def test_mpi_peer_is_correct_and_reports_nccl_tests_figures(tandem_bin_dir, op, ranks):
    exe = peer(tandem_bin_dir, "mpi_collective_bench")
    proc = subprocess.run(mpirun_argv(ranks) + [exe, "--op", op, "--impl", "openmpi_tcp"] + COMMON,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    check(results(proc.stdout), "openmpi_tcp", op, ranks)


@pytest.mark.parametrize("variants", [[], ["a:", "b:TANDEM_COLLECTIVE_SAME_HOST_COPY=0"]],
                         ids=["one-tandem", "two-variants"])
def test_compare_script_tabulates_peers_and_a_tandem_command(tandem_bin_dir, variants):
    peer(tandem_bin_dir, "gloo_collective_bench")
    # Any command printing the JSON stands in for tandem's collective_bench,
    # here Gloo's halving-doubling behind a prefix like tandem launch's.
    template = ("sh -c '{bin}/gloo_collective_bench --ranks {ranks} --algo halving_doubling "
                "--min-bytes {min_bytes} --max-bytes {max_bytes} --factor {factor} "
                "--iters {iters} --warmup {warmup} --json | sed \"s/^/[worker 0] /\"'")
    proc = subprocess.run(
        ["/usr/bin/python3", REPO / "bench" / "compare_collectives.py", "--bin", tandem_bin_dir,
         "--ranks", "3", "--min-bytes", "4K", "--max-bytes", "64K", "--factor", "4", "--iters",
         "2", "--warmup", "1", "--rounds", "2", "--peers", "gloo_ring", "--tandem-cmd", template]
        + [arg for v in variants for arg in ("--variant", v)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [l for l in proc.stdout.splitlines() if l.startswith("| ")]
    tandems = [f"tandem_{v.split(':')[0]}" for v in variants] or ["tandem"]
    k = len(tandems)
    assert lines[0] == ("| size | " + " | ".join(tandems) + " | gloo_ring | best TCP peer | "
                        + " | ".join(f"{t}/best TCP" for t in tandems) + " |"), proc.stdout
    rows = {l.split(" | ")[0][2:]: l.split(" | ") for l in lines[1:4]}
    assert list(rows) == ["4 KiB", "16 KiB", "64 KiB"], proc.stdout
    for cells in rows.values():
        ring = float(cells[1 + k])
        assert "(gloo_ring)" in cells[2 + k]
        for i in range(k):
            tandem = float(cells[1 + i])
            ratio = float(cells[3 + k + i].rstrip(" |"))
            # Bandwidths are rounded to 3 significant digits, ratios to 2 decimals.
            low = tandem * (1 - 5e-3) / (ring * (1 + 5e-3))
            high = tandem * (1 + 5e-3) / (ring * (1 - 5e-3))
            assert low - 0.005 <= ratio <= high + 0.005, (cells, low, high)
