"""Store checkpoints of the main job (docs/checkpoints.md; docs/training.md,
"Checkpoints"): the reduced job (dist_sync, 2 workers, 1 server, SGD with
momentum on the server) checkpoints every few steps; every process of it is
killed with SIGKILL mid-run; the job started again with TANDEM_RESTART_COUNT=1
resumes from the newest consistent checkpoint, mid-epoch, and ends with
exactly (bit for bit) the weights of an undisturbed run. With the newest
round's server file corrupted after the kill, the restart refuses that round,
says which file was wrong, and resumes from the round before it, still to the
same weights. Under `tandem launch --max-restarts 2`, the launcher restarts
the job itself after a process is killed, or after a worker frozen with
SIGSTOP is declared lost by the heartbeat timeout and the others exit with
200, and the job still ends with those weights.

Skipped with a reason when the trainer was not built (no LibTorch) or
Debian's dataset-fashion-mnist is not installed."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import numpy as np
import pytest

# The trainer fixture (skips without LibTorch or the data set) of the main job's tests.
from test_fashion_mnist import trainer  # noqa: F401

# 2 workers x 32 over 1920 examples: 30 steps per epoch, 60 in all; a
# checkpoint every 5 steps. The job is killed once round 10 is complete, 50
# steps before its end, so the resumed run finishes the first epoch mid-way
# and goes through the second.
STEPS_PER_EPOCH = 30
TOTAL_STEPS = 2 * STEPS_PER_EPOCH
EVERY = 5
KILL_AFTER_ROUND = 10
ARGS = ["--quiet", "--threads", "1", "--kvstore", "dist_sync", "--epochs", "2",
        "--train-limit", str(64 * STEPS_PER_EPOCH), "--test-limit", "200", "--batch-size", "32", "--seed", "11",
        "--checkpoint-every", str(EVERY)]


def complete_rounds(directory: Path) -> list[int]:
    """The rounds of `directory` that have a MANIFEST, newest first."""
    rounds = []
    for entry in directory.glob("round-*"):
        if (entry / "MANIFEST").is_file():
            rounds.append(int(entry.name.removeprefix("round-")))
    return sorted(rounds, reverse=True)


# The undisturbed run's final weights, computed once.
_undisturbed: list[np.ndarray] = []


def undisturbed_weights(launch, trainer: Path, tmp_path: Path) -> np.ndarray:
    if _undisturbed:
        return _undisturbed[0]
    out = tmp_path / "undisturbed.bin"
    result = launch(2, 1, [trainer, *ARGS, "--checkpoint-dir", str(tmp_path / "undisturbed"),
                           "--dump-weights", str(out)], timeout=180)
    assert result.returncode == 0, result.job.describe()
    # Only the two newest complete rounds are kept.
    assert complete_rounds(tmp_path / "undisturbed") == [TOTAL_STEPS, TOTAL_STEPS - EVERY]
    _undisturbed.append(np.fromfile(out, dtype="<f4"))
    return _undisturbed[0]


def wait_for_round(job, directory: Path) -> None:
    """Waits until round KILL_AFTER_ROUND of `directory` is complete (has its
    MANIFEST); fails if the job ends first or it takes over 120 s."""
    deadline = time.monotonic() + 120
    while not (directory / f"round-{KILL_AFTER_ROUND}" / "MANIFEST").is_file():
        assert job.returncode is None, f"the job ended before round {KILL_AFTER_ROUND}\n" + \
            job.describe()
        assert time.monotonic() < deadline, "no checkpoint within 120 s\n" + job.describe()
        time.sleep(0.005)


def kill_mid_run(launch, trainer: Path, directory: Path, dump: Path) -> None:
    """Starts the job, waits until round KILL_AFTER_ROUND is complete, then
    kills every process of the job (launcher included) with SIGKILL."""
    job = launch.start(2, 1, [trainer, *ARGS, "--checkpoint-dir", str(directory),
                              "--dump-weights", str(dump)])
    wait_for_round(job, directory)
    victims = job.processes()
    assert len(victims) >= 4, victims  # the launcher, a scheduler, a server, 2 workers
    for p in victims:
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    job.wait(timeout=30)
    job.assert_no_leftovers()
    assert "final test accuracy" not in job.output, "the job finished before it was killed"
    assert not dump.exists()


def restart(launch, trainer: Path, directory: Path, dump: Path):
    result = launch(2, 1, [trainer, *ARGS, "--checkpoint-dir", str(directory),
                           "--dump-weights", str(dump)],
                    env={"TANDEM_RESTART_COUNT": "1"}, timeout=180)
    assert result.returncode == 0, result.job.describe()
    return result


def test_killed_job_resumes_to_the_undisturbed_weights(launch, trainer, tmp_path):
    expected = undisturbed_weights(launch, trainer, tmp_path)
    directory = tmp_path / "killed"
    dump = tmp_path / "resumed.bin"
    kill_mid_run(launch, trainer, directory, dump)
    newest = complete_rounds(directory)[0]
    assert newest >= KILL_AFTER_ROUND and newest % EVERY == 0
    result = restart(launch, trainer, directory, dump)
    m = re.search(r"restart 1: resuming from the store checkpoint in \S+ after step (\d+) "
                  r"\(epoch (\d+), step (\d+)\)", result.output)
    assert m, result.output
    assert int(m.group(1)) == newest, result.output
    assert (int(m.group(2)), int(m.group(3))) == (newest // STEPS_PER_EPOCH + 1,
                                                  newest % STEPS_PER_EPOCH)
    np.testing.assert_array_equal(np.fromfile(dump, dtype="<f4"), expected)
    assert complete_rounds(directory) == [TOTAL_STEPS, TOTAL_STEPS - EVERY]


def test_corrupt_newest_round_falls_back_to_the_previous(launch, trainer, tmp_path):
    expected = undisturbed_weights(launch, trainer, tmp_path)
    directory = tmp_path / "killed"
    dump = tmp_path / "resumed.bin"
    kill_mid_run(launch, trainer, directory, dump)
    newest, previous = complete_rounds(directory)[:2]
    assert previous == newest - EVERY
    damaged = directory / f"round-{newest}" / "server-0.ckpt"
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0x01
    damaged.write_bytes(bytes(data))
    result = restart(launch, trainer, directory, dump)
    assert re.search(rf"refused round {newest} of \S+: checkpoint file \S*round-{newest}/"
                     r"server-0\.ckpt: checksum mismatch", result.output), result.output
    assert re.search(rf"resuming from the store checkpoint in \S+ after step {previous} ",
                     result.output), result.output
    np.testing.assert_array_equal(np.fromfile(dump, dtype="<f4"), expected)


def start_with_restarts(launch, trainer: Path, directory: Path, dump: Path,
                        env: dict[str, str] | None = None):
    """Starts the job under `tandem launch --max-restarts 2 --restart-delay 0`,
    with `env` for its processes; returns the Job at once."""
    return launch.start(2, 1, [trainer, *ARGS, "--checkpoint-dir", str(directory),
                               "--dump-weights", str(dump)],
                        env=env, extra_args=["--max-restarts", "2", "--restart-delay", "0"])


@pytest.mark.parametrize("role,index", [("worker", 1), ("server", 0), ("scheduler", 0)])
def test_launcher_restarts_the_job_from_the_last_checkpoint(launch, trainer, tmp_path, role, index):
    """tandem launch --max-restarts 2: a worker, the server or the scheduler
    killed mid-run makes the launcher tear the job down and start it again
    (TANDEM_RESTART_COUNT=1); the job resumes from its newest checkpoint and
    ends with the undisturbed run's weights."""
    expected = undisturbed_weights(launch, trainer, tmp_path)
    directory = tmp_path / "gang"
    dump = tmp_path / "restarted.bin"
    job = start_with_restarts(launch, trainer, directory, dump)
    wait_for_round(job, directory)
    victims = sorted(job.role_processes(role), key=lambda p: p.env.get("DMLC_RANK", ""))
    assert len(victims) == {"worker": 2, "server": 1, "scheduler": 1}[role], victims
    victim = victims[index]
    os.kill(victim.pid, signal.SIGKILL)
    assert job.wait(timeout=180) == 0, job.describe()
    job.assert_no_leftovers()
    output = job.output
    assert re.search(rf"restarting the job \(restart 1 of 2\) after {role}( \d)? \(pid "
                     rf"{victim.pid}\) killed by signal 9", output), job.describe()
    m = re.search(r"restart 1: resuming from the store checkpoint in \S+ after step (\d+) ",
                  output)
    assert m and int(m.group(1)) >= KILL_AFTER_ROUND, job.describe()
    assert "job succeeded after 1 restart" in output, job.describe()
    np.testing.assert_array_equal(np.fromfile(dump, dtype="<f4"), expected)


# A frozen process is found by the heartbeat timeout alone (docs/reliability.md):
# 4 s here rather than the default 10 s.
SHORT_HEARTBEATS = {"PS_HEARTBEAT_INTERVAL": "0.5", "PS_HEARTBEAT_TIMEOUT": "4"}


def end_stopped_process(job, pid: int) -> None:
    """Kills `pid` (then lets it run, so that the kill is delivered at once) if
    it is still a process of `job`: a process left stopped would outlive the
    test. A PID reused by another process since is left alone."""
    if any(p.pid == pid for p in job.processes()):
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def test_a_frozen_worker_is_restarted_and_the_job_ends_with_the_undisturbed_weights(
        launch, trainer, tmp_path):
    """tandem launch --max-restarts 2: worker 1 stopped with SIGSTOP mid-run
    (alive, its sockets open, silent) is declared lost by the heartbeat
    timeout; the others exit with 200 (retryable), the launcher tears the job
    down (the frozen one with it) and starts it again; it resumes from its
    newest checkpoint and ends with the undisturbed run's weights."""
    expected = undisturbed_weights(launch, trainer, tmp_path)
    directory = tmp_path / "frozen"
    dump = tmp_path / "restarted.bin"
    job = start_with_restarts(launch, trainer, directory, dump, env=SHORT_HEARTBEATS)
    wait_for_round(job, directory)
    frozen = [p for p in job.role_processes("worker") if p.env.get("DMLC_WORKER_ID") == "1"]
    assert len(frozen) == 1, frozen
    pid = frozen[0].pid
    try:
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        # Found by the heartbeat timeout (4 s) less up to one interval (0.5 s).
        job.wait_for_line(r"\[launcher\] \w+( \d)? \(pid \d+\) exited with status 200", timeout=30)
        detected = time.monotonic() - stopped
        job.wait_for_line(r"\[launcher\] restarting the job \(restart 1 of 2\)", timeout=60)
        restarted = time.monotonic() - stopped
        assert job.wait(timeout=180) == 0, job.describe()
        ended = time.monotonic() - stopped
    finally:
        end_stopped_process(job, pid)
    print(f"\nSIGSTOP of worker 1: first exit 200 after {detected:.2f} s, restart line after "
          f"{restarted:.2f} s, the job's end after {ended:.2f} s")
    job.assert_no_leftovers()
    output = job.output
    assert 3.0 < detected < 15.0, job.describe()
    # Every other process of the first attempt saw worker 1 lost and exited
    # with 200 (retryable); the frozen one was ended by the tear-down.
    first_attempt = output[:output.index("restarting the job")]
    for label in ("scheduler", "server 0", "worker 0"):
        assert re.search(rf"\[launcher\] {label} \(pid \d+\) exited with status 200",
                         first_attempt), f"{label} did not exit with 200\n" + job.describe()
    assert re.search(rf"\[launcher\] worker 1 \(pid {pid}\) killed by signal (9|15)",
                     first_attempt), job.describe()
    lost = (r"lost worker 1 \(node \d+, [^)]*\): no heartbeat for [\d.]+ s "
            r"\(PS_HEARTBEAT_TIMEOUT=4\.0 s\)")
    assert re.search(rf"\[worker 0\] fashion_mnist_train: {lost}", first_attempt), \
        job.describe()
    # The launcher names a survivor's 200, with its last words, as the cause.
    m = re.search(rf"\[launcher\] job failed: (\w+(?: \d)?) \(pid \d+\) exited with status 200: "
                  rf".*{lost}", first_attempt)
    assert m, job.describe()
    assert re.search(rf"\[launcher\] restarting the job \(restart 1 of 2\) after {m.group(1)} "
                     r"\(pid \d+\) exited with status 200; starting it again in 0 s", output), \
        job.describe()
    m = re.search(r"restart 1: resuming from the store checkpoint in \S+ after step (\d+) ",
                  output)
    assert m and int(m.group(1)) >= KILL_AFTER_ROUND, job.describe()
    assert "job succeeded after 1 restart" in output, job.describe()
    np.testing.assert_array_equal(np.fromfile(dump, dtype="<f4"), expected)
