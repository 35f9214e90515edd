"""A job ends at once, on every process, with the cause named and the
documented exit code (docs/reliability.md, docs/deploy.md "Exit codes and
restarts"):

- a server that cannot load the optimizer states it was asked to load
  (`--resume` with a damaged `kv-optimizer.server0`) stops the whole job: each
  process names the file and exits with 78, in seconds, where it used to hang
  until TANDEM_KV_TIMEOUT;
- a worker whose peer is killed with SIGKILL exits with 200 (retryable), from
  the C++ example and from Python (an uncaught tandem.PeerLost);
- a Python worker that raises an error of its own exits with 1 at once
  instead of waiting in the final barrier, and the others end with 200.

Skipped with a reason when the trainer or the Python package was not built."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from python_job import python_env, worker
# The trainer fixture (skips without LibTorch or the data set) of the main job's tests.
from test_fashion_mnist import trainer  # noqa: F401

ARGS = ["--quiet", "--threads", "1", "--kvstore", "dist_sync", "--train-limit", "640",
        "--test-limit", "100", "--batch-size", "32", "--seed", "3"]
LABELS = ("scheduler", "server 0", "worker 0", "worker 1")


def process_lines(output: str, label: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(f"[{label}] ")]


def exit_status(output: str, label: str) -> int:
    m = re.search(rf"\[launcher\] {label} \(pid \d+\) exited with status (\d+)", output)
    assert m, f"no exit status of {label}:\n{output}"
    return int(m.group(1))


def test_a_damaged_optimizer_state_file_stops_every_process_at_once(launch, trainer, tmp_path):
    directory = tmp_path / "ck"
    first = launch(2, 1, [trainer, *ARGS, "--epochs", "1", "--checkpoint-dir", str(directory)],
                   timeout=120)
    assert first.returncode == 0, first.job.describe()
    states = directory / "kv-optimizer.server0"
    data = bytearray(states.read_bytes())
    data[len(data) // 2] ^= 0x01
    states.write_bytes(bytes(data))

    result = launch(2, 1, [trainer, *ARGS, "--epochs", "2", "--resume",
                           "--checkpoint-dir", str(directory)], timeout=60)
    assert result.returncode == 78, result.job.describe()
    # It used to hang for TANDEM_KV_TIMEOUT (600 s); the start-up is most of this.
    assert result.seconds < 10, result.job.describe()
    for label in LABELS:
        named = [line for line in process_lines(result.output, label) if str(states) in line]
        assert named, f"{label} never names {states}:\n{result.output}"
        assert exit_status(result.output, label) == 78, result.output
    assert re.search(r"stopped the job: optimizer states file \S+kv-optimizer\.server0: "
                     r"optimizer 'sgd': cannot load states .*checksum mismatch", result.output), \
        result.output
    assert re.search(r"\[launcher\] job failed: \w+( \d)? \(pid \d+\) exited with status 78",
                     result.output), result.output


def wait_for(job, pattern: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not re.search(pattern, job.output):
        assert job.returncode is None, job.describe()
        assert time.monotonic() < deadline, f"no '{pattern}' within {timeout} s\n" + job.describe()
        time.sleep(0.01)


def kill_worker(job, rank: int) -> int:
    victims = [p for p in job.role_processes("worker") if p.env.get("DMLC_WORKER_ID") == str(rank)]
    assert len(victims) == 1, victims
    os.kill(victims[0].pid, signal.SIGKILL)
    return victims[0].pid


def kill_worker_1_and_check_worker_0_exits_200(job, ready: str, last_words: str) -> None:
    """Waits for `ready` in the job's output, kills worker 1 with SIGKILL, and
    checks that the launcher names it as the cause and worker 0 ended with
    200 after printing `last_words` (a regular expression)."""
    wait_for(job, ready)
    victim = kill_worker(job, 1)
    job.wait(timeout=60)
    job.assert_no_leftovers()
    output = job.output
    assert re.search(rf"\[launcher\] job failed: worker 1 \(pid {victim}\) killed by signal 9",
                     output), job.describe()
    assert exit_status(output, "worker 0") == 200, job.describe()
    assert re.search(rf"\[worker 0\] {last_words}", output), job.describe()


def test_the_example_exits_200_when_a_peer_is_killed(launch, trainer):
    job = launch.start(2, 1, [trainer, *ARGS, "--epochs", "20"])
    kill_worker_1_and_check_worker_0_exits_200(job, r"\[worker 0\] .*epoch 1",
                                               r"fashion_mnist_train: lost worker 1")


def test_a_python_worker_exits_200_when_a_peer_is_killed(launch, tandem_bin_dir):
    job = launch.start(2, 1, worker("peer_loss_worker.py") + ["--rounds", "100000"],
                       launcher_env=python_env(tandem_bin_dir))
    kill_worker_1_and_check_worker_0_exits_200(
        job, r"\[worker 1\] peer_loss: round 3 rank 1 value 7\b",
        r"(tandem\._core\.)?PeerLost: .*lost worker 1")


def test_a_python_worker_that_raises_leaves_at_once(launch, tandem_bin_dir):
    """Rank 0's own ValueError ends it with 1 without the final barrier (which
    used to wait for rank 1, itself blocked in a push that needs rank 0); rank 1
    then fails with PeerLost and 200, and the job ends in seconds."""
    result = launch(2, 1, worker("peer_loss_worker.py") + ["--rounds", "100000",
                                                           "--raise-at", "5"],
                    launcher_env=python_env(tandem_bin_dir), timeout=60)
    output = result.output
    assert "ValueError: rank 0 gives up after round 5" in output, output
    assert exit_status(output, "worker 0") == 1, output
    assert exit_status(output, "worker 1") == 200, output
    assert re.search(r"\[launcher\] job failed: worker 0 \(pid \d+\) exited with status 1\b",
                     output), output
    assert result.seconds < 20, output
