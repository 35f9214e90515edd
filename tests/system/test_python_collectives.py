"""tandem's collectives through the Python bindings, in jobs of `tandem
launch --no-scheduler` (and one with a scheduler process) on loopback:
tests/system/python_workers/collective_worker.py runs every operation on
NumPy arrays or torch tensors of every dtype and several sizes and checks
each result in closed form, then bad calls raise tandem.InvalidArgument with
the C++ message; this file checks that every rank did, with the same checks."""

from __future__ import annotations

import re
import subprocess

import pytest

from python_job import check_ok, python_env, worker


@pytest.mark.parametrize("kind,workers", [("numpy", 2), ("numpy", 4), ("torch", 3)])
def test_every_collective_exact_on_every_dtype(launch, tandem_bin_dir, kind, workers):
    result = launch(workers, 0, worker("collective_worker.py") + ["--kind", kind],
                    extra_args=["--no-scheduler"], launcher_env=python_env(tandem_bin_dir),
                    timeout=180)
    assert result.returncode == 0, result.job.describe()
    assert check_ok(result.output, "collective_worker", workers, kind) > 300
    for rank in range(workers):
        assert (f"[worker {rank}] collective_worker: error size mismatch: InvalidArgument: "
                f"AllReduce of 'unnamed tensor' (6 x float32, group rank {rank} of {workers}): "
                f"output is 5 x float32, expected the input's 6 x float32") in result.output


def test_with_a_scheduler_process(launch, tandem_bin_dir):
    result = launch(2, 0, worker("collective_worker.py") + ["--kind", "numpy"],
                    launcher_env=python_env(tandem_bin_dir), timeout=180)
    assert result.returncode == 0, result.job.describe()
    check_ok(result.output, "collective_worker", 2, "numpy")


def test_horovod_style_api_under_a_plain_launch(launch, tandem_bin_dir):
    # `tandem launch -n 3` without -s: no servers, worker 0 hosts the rendezvous.
    argv = launch.argv(3, 0, worker("horovod_api_worker.py"))
    argv.remove("-s")
    argv.remove("0")
    job = launch.start_command(argv, env=python_env(tandem_bin_dir))
    assert job.wait(120) == 0, job.describe()
    version = subprocess.run([str(tandem_bin_dir / "tandem"), "version"], capture_output=True,
                             text=True, check=True).stdout.split()[1]
    lines = sorted(re.findall(r"\[worker (\d)\] horovod_api: (.*)", job.output))
    assert lines == [
        (str(r), f"rank={r} size=3 local_rank={r} local_size=3 sum=6 avg=2 average=2 max=3 "
                 f"torch_default=2 torch_sum=6 version={version}")
        for r in range(3)
    ], job.output
