"""`tandem bench NAME`: the one entry point for tandem's benchmarks finds the
benchmark program next to the tandem binary and runs it (a collective as a
collectives-only job of -n local ranks). Checks that the command runs the
right program with the user's arguments and keeps its exit code; the
figures themselves belong in docs/benchmarks.md, not in a test."""

from __future__ import annotations

import re
import subprocess

import pytest

ROW = re.compile(r"^\[worker 0\]\s+(\d+)\s+(\d+)\s+float\s+sum\s+\S+\s+\S+\s+\S+\s+\S+\s+(\d+)$",
                 re.M)


@pytest.mark.parametrize("ranks", [2, 3])
def test_allreduce_runs_as_a_job_of_n_ranks_with_the_users_arguments(tandem_bin_dir, ranks):
    if not (tandem_bin_dir / "collective_bench").exists():
        pytest.skip("benchmarks not built (TANDEM_BUILD_BENCH=OFF)")
    result = subprocess.run(
        [tandem_bin_dir / "tandem", "bench", "allreduce", "-n", str(ranks), "--min-bytes", "4096",
         "--max-bytes", "65536", "--iters", "3", "--warmup", "1"],
        capture_output=True, text=True, timeout=120)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert f"allreduce, {ranks} ranks" in out, out
    rows = ROW.findall(out)
    # 4 KiB to 64 KiB by the default factor 4: 4096, 16384, 65536 bytes.
    assert [int(size) for size, _, _ in rows] == [4096, 16384, 65536], out
    assert all(int(count) * 4 == int(size) for size, count, _ in rows), out
    assert all(wrong == "0" for _, _, wrong in rows), out
    for rank in range(ranks):
        assert f"worker {rank} (pid" in out and "exited with status 0" in out, out


def test_an_unknown_benchmark_is_a_config_error_naming_it(tandem_bin_dir):
    result = subprocess.run([tandem_bin_dir / "tandem", "bench", "no-such"], capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 78, result.stderr  # kExitConfigError
    assert "unknown benchmark 'no-such'" in result.stderr
    assert "allreduce" in result.stderr  # the names it knows
