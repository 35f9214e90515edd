"""Running Python workers (tests/system/python_workers/) as job processes
with the build's tandem package: the environment they need, and the check
of their closing lines."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

WORKERS_DIR = Path(__file__).resolve().parent / "python_workers"
PYTHON = "/usr/bin/python3"


def python_env(tandem_bin_dir: Path) -> dict[str, str]:
    """The launcher environment (inherited by the job) that imports the build's
    package from <build>/python; skips when the package was not built."""
    package = tandem_bin_dir.parent / "python"
    if not list((package / "tandem").glob("_core*.so")):
        pytest.skip(f"the tandem Python package is not built in {package} "
                    "(pybind11-dev missing when CMake ran?)")
    path = [str(package), str(WORKERS_DIR)]
    if os.environ.get("PYTHONPATH"):
        path.append(os.environ["PYTHONPATH"])
    return {"PYTHONPATH": os.pathsep.join(path), "OMP_NUM_THREADS": "1"}


def worker(name: str) -> list[str]:
    return [PYTHON, str(WORKERS_DIR / name)]


def check_ok(output: str, label: str, workers: int, kind: str) -> int:
    """Every rank printed '<label>: ok kind=K rank=R size=N checks=C' with the
    same C; returns C."""
    found = re.findall(rf"\[worker (\d+)\] {label}: ok kind=(\w+) rank=(\d+) size=(\d+) "
                       rf"checks=(\d+)", output)
    assert sorted(int(g[2]) for g in found) == list(range(workers)), output
    for tag, k, rank, size, _ in found:
        assert tag == rank and k == kind and int(size) == workers, (tag, k, rank, size)
    counts = {int(g[4]) for g in found}
    assert len(counts) == 1, f"ranks ran different checks: {found}"
    return counts.pop()
