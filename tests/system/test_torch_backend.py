"""The "tandem" backend of torch.distributed (python/c10d/,
docs/pytorch-backend.md) through `tandem launch` and torchrun: every
operation gives the closed-form result of N ranks' inputs (every dtype,
reduce op, uneven allgather and all-to-all, sub-groups, futures, and
point-to-point: isend/irecv rings, batch_isend_irecv, tags, a receive from
any rank naming its sender, a size that differs); DDP on
tandem trains to the parameters DDP on gloo gives, and
ZeroRedundancyOptimizer to those of one process, and DDP's communication
hooks (allreduce, fp16 compression, PowerSGD) as on gloo; bad input raises on every
rank naming what was wrong; a group's timeout ends a wait with an error
naming the operation (tests/system/python_workers/torch_backend_worker.py).
"""

from __future__ import annotations

import re
import subprocess
import time
from datetime import timedelta  # noqa: F401  (the worker's import, checked here first)
from pathlib import Path

import pytest

from python_job import PYTHON, python_env, worker

OK = re.compile(r"\[worker (\d+)\] torch_backend: ok kind=(\w+) rank=(\d+) size=(\d+) "
                r"checks=(\d+)")
TORCHRUN = Path(__file__).with_name("torchrun_compat.py")


@pytest.fixture
def backend_env(tandem_bin_dir):
    env = python_env(tandem_bin_dir)
    package = tandem_bin_dir.parent / "python" / "tandem"
    if not list(package.glob("_c10d*.so")):
        pytest.skip(f"the torch.distributed backend is not built in {package} "
                    "(libtorch-dev missing when CMake ran?)")
    return env


def check_all_ok(output: str, kind: str, workers: int) -> dict[int, int]:
    found = OK.findall(output)
    assert sorted(int(f[2]) for f in found) == list(range(workers)), output
    for tag, k, rank, size, _ in found:
        assert tag == rank and k == kind and int(size) == workers, (tag, k, rank, size)
    return {int(f[2]): int(f[4]) for f in found}


def test_every_operation_exact(launch, tandem_bin_dir, backend_env):
    result = launch(3, 0, worker("torch_backend_worker.py") + ["ops"],
                    launcher_env=backend_env, extra_args=["--no-scheduler"], timeout=240)
    assert result.returncode == 0, result.job.describe()
    counts = check_all_ok(result.output, "ops", 3)
    # Ranks 0 and 2 are members of the two sub-groups, rank 1 of neither;
    # the last rank alone checks what reduce and gather left there.
    assert counts == {0: 49, 1: 47, 2: 48}, counts
    # The mismatch at the end was named the same way on every rank.
    assert result.output.count("mismatched dtype") >= 3, result.output


@pytest.mark.parametrize("workers", [2, 4])
def test_ddp_same_parameters_as_gloo(launch, tandem_bin_dir, backend_env, workers):
    result = launch(workers, 0, worker("torch_backend_worker.py") + ["ddp"],
                    launcher_env=backend_env, extra_args=["--no-scheduler"], timeout=240)
    assert result.returncode == 0, result.job.describe()
    assert set(check_all_ok(result.output, "ddp", workers).values()) == {5}


def test_zero_redundancy_optimizer_as_one_process(launch, tandem_bin_dir, backend_env):
    result = launch(2, 0, worker("torch_backend_worker.py") + ["zero"],
                    launcher_env=backend_env, extra_args=["--no-scheduler"], timeout=240)
    assert result.returncode == 0, result.job.describe()
    assert set(check_all_ok(result.output, "zero", 2).values()) == {5}


def test_ddp_communication_hooks_as_gloo(launch, tandem_bin_dir, backend_env):
    # allreduce_hook, fp16_compress_hook and powerSGD_hook (whose callbacks
    # wait for further allreduces) give gloo's parameters.
    result = launch(2, 0, worker("torch_backend_worker.py") + ["hooks"],
                    launcher_env=backend_env, extra_args=["--no-scheduler"], timeout=240)
    assert result.returncode == 0, result.job.describe()
    assert set(check_all_ok(result.output, "hooks", 2).values()) == {3}


def test_group_timeout_names_the_operation(launch, tandem_bin_dir, backend_env):
    start = time.monotonic()
    result = launch(2, 0, worker("torch_backend_worker.py") + ["timeout"],
                    launcher_env=backend_env, extra_args=["--no-scheduler"], timeout=120)
    elapsed = time.monotonic() - start
    assert result.returncode != 0, result.output
    assert re.search(r"\[worker 0\] .*Timeout.*allreduce #1", result.output), result.output
    assert "not heard from group rank(s) 1 (worker 1)" in result.output, result.output
    assert "exited with status 201" in result.output, result.output
    assert elapsed < 60, f"took {elapsed:.0f} s"


def test_store_wait_names_the_key(backend_env, tmp_path):
    # One rank of two: the other never sets its host name; the store's own
    # timeout ends rank 0's wait with the key it waited for.
    program = (
        "import datetime, torch.distributed as dist, tandem.torch\n"
        "store = dist.HashStore()\n"
        "store.set_timeout(datetime.timedelta(seconds=1))\n"
        "try:\n"
        "    dist.init_process_group('tandem', store=store, rank=0, world_size=2)\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, e)\n")
    proc = subprocess.run([PYTHON, "-c", program], env={**backend_env, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Timeout rank 0 of the tandem process group waited for every "
                                  "rank's host name (store key 'tandem/host/1')"), proc.stdout


def test_under_torchrun(backend_env, tmp_path):
    from test_launch_torchrun import torch_available, torchrun_argv
    from test_contracts_start import coordinator_port
    if not torch_available():
        pytest.skip("torch.distributed.run is not installed")
    port = coordinator_port()
    argv = torchrun_argv(2, 1, 0, port, tmp_path, worker("torch_backend_worker.py") + ["ddp"])
    proc = subprocess.run(argv, env={**backend_env, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=240)
    logs = {r: (tmp_path / f"rank{r}.log").read_text() for r in range(2)}
    assert proc.returncode == 0, (proc.stderr, logs)
    for r in range(2):
        assert f"torch_backend: ok kind=ddp rank={r} size=2 checks=5" in logs[r], logs[r]
