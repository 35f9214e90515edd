"""Store checkpoints of the main job (docs/checkpoints.md; docs/training.md,
"Checkpoints"): the reduced job (dist_sync, 2 workers, 1 server, SGD with
momentum on the server) checkpoints every few steps; every process of it is
killed with SIGKILL mid-run; the job started again with TANDEM_RESTART_COUNT=1
resumes from the newest consistent checkpoint, mid-epoch, and ends with
exactly (bit for bit) the weights of an undisturbed run. With the newest
round's server file corrupted after the kill, the restart refuses that round,
says which file was wrong, and resumes from the round before it, still to the
same weights.

Skipped with a reason when the trainer was not built (no LibTorch) or
Debian's dataset-fashion-mnist is not installed."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import numpy as np

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


def kill_mid_run(launch, trainer: Path, directory: Path, dump: Path) -> None:
    """Starts the job, waits until round KILL_AFTER_ROUND is complete, then
    kills every process of the job (launcher included) with SIGKILL."""
    job = launch.start(2, 1, [trainer, *ARGS, "--checkpoint-dir", str(directory),
                              "--dump-weights", str(dump)])
    deadline = time.monotonic() + 120
    while not (directory / f"round-{KILL_AFTER_ROUND}" / "MANIFEST").is_file():
        assert job.returncode is None, f"the job ended before round {KILL_AFTER_ROUND}\n" + \
            job.describe()
        assert time.monotonic() < deadline, "no checkpoint within 120 s\n" + job.describe()
        time.sleep(0.005)
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


def test_launcher_restarts_the_job_from_the_last_checkpoint(launch, trainer, tmp_path):
    """tandem launch --max-restarts 2: a worker killed mid-run makes the
    launcher tear the job down and start it again (TANDEM_RESTART_COUNT=1);
    the job resumes from its newest checkpoint and ends with the undisturbed
    run's weights."""
    expected = undisturbed_weights(launch, trainer, tmp_path)
    directory = tmp_path / "gang"
    dump = tmp_path / "restarted.bin"
    job = launch.start(2, 1, [trainer, *ARGS, "--checkpoint-dir", str(directory),
                              "--dump-weights", str(dump)],
                       extra_args=["--max-restarts", "2", "--restart-delay", "0"])
    deadline = time.monotonic() + 120
    while not (directory / f"round-{KILL_AFTER_ROUND}" / "MANIFEST").is_file():
        assert job.returncode is None, job.describe()
        assert time.monotonic() < deadline, "no checkpoint within 120 s\n" + job.describe()
        time.sleep(0.005)
    workers = job.role_processes("worker")
    assert len(workers) == 2, workers
    os.kill(workers[1].pid, signal.SIGKILL)
    assert job.wait(timeout=180) == 0, job.describe()
    job.assert_no_leftovers()
    output = job.output
    assert re.search(r"restarting the job \(restart 1 of 2\) after worker \d \(pid "
                     rf"{workers[1].pid}\) killed by signal 9", output), job.describe()
    m = re.search(r"restart 1: resuming from the store checkpoint in \S+ after step (\d+) ",
                  output)
    assert m and int(m.group(1)) >= KILL_AFTER_ROUND, job.describe()
    assert "job succeeded after 1 restart" in output, job.describe()
    np.testing.assert_array_equal(np.fromfile(dump, dtype="<f4"), expected)
