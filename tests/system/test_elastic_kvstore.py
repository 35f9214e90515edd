"""The parameter server in an elastic job through `tandem launch --workers
MIN:MAX` (docs/elastic.md): workers killed during dist_sync rounds leave the
job, the servers complete every later round with the workers that remain,
and the survivors' pulled values equal the closed form of exactly those
workers' pushes (tests/system/python_workers/elastic_rounds_worker.py checks
every value). The job succeeds; nothing is left running. A frozen worker
(SIGSTOP) is left behind after the heartbeat timeout in the same way, and
fails when it wakes up."""

from __future__ import annotations

import os
import re
import signal

import pytest

from python_job import python_env, worker

ROUNDS = 12


@pytest.mark.parametrize("workers,servers,minimum,leave", [
    (4, 2, 3, {3: 5}),          # the last rank, two servers, a split key
    (4, 1, 2, {0: 4, 2: 8}),    # rank 0 first, then another: epoch 2
])
def test_killed_workers_leave_and_the_rounds_stay_exact(launch, tandem_bin_dir, workers,
                                                         servers, minimum, leave):
    argv = worker("elastic_rounds_worker.py") + ["--rounds", str(ROUNDS)]
    for rank, round_ in leave.items():
        argv += ["--leave", f"{rank}:{round_}"]
    result = launch(workers, servers, argv,
                    env={"MXNET_KVSTORE_BIGARRAY_BOUND": "100"},
                    extra_args=["--workers", f"{minimum}:{workers}"],
                    launcher_env=python_env(tandem_bin_dir), timeout=120)
    out = result.output
    assert result.returncode == 0, out
    survivors = [r for r in range(workers) if r not in leave]
    for rank in survivors:
        for r in range(1, ROUNDS + 1):
            members = [w for w in range(workers) if leave.get(w, ROUNDS + 1) > r]
            value = r * sum(w + 1 for w in members)
            assert f"[worker {rank}] elastic: round {r} rank {rank} value {value} " \
                   f"members {len(members)}" in out, (rank, r, out)
        assert re.search(rf"\[worker {rank}\] elastic: done rank {rank} workers "
                         rf"\[{', '.join(map(str, survivors))}\] epoch {len(leave)} "
                         rf"num_workers {len(survivors)}", out), out
    for rank in leave:
        assert re.search(rf"\[launcher\] worker {rank} \(pid \d+\) killed by signal 9", out), out
        # Every other process heard of it, from the scheduler.
        assert re.search(rf"\[scheduler\] .*worker {rank} \(node \d+, [^)]*\) left the job", out), \
            out
    assert re.search(rf"\[launcher\] job succeeded with {len(survivors)} of {workers} workers",
                     out), out


def test_a_frozen_worker_is_left_behind_after_the_heartbeat_timeout(launch, tandem_bin_dir):
    workers, frozen, at = 3, 1, 4
    job = launch.start(workers, 1, worker("elastic_rounds_worker.py") +
                       ["--rounds", str(ROUNDS), "--freeze", f"{frozen}:{at}"],
                       env={"PS_HEARTBEAT_INTERVAL": "0.5", "PS_HEARTBEAT_TIMEOUT": "3"},
                       extra_args=["--workers", f"2:{workers}"],
                       launcher_env=python_env(tandem_bin_dir))
    m = job.wait_for_line(rf"\[worker {frozen}\] elastic: rank {frozen} pid (\d+) freezes "
                          rf"before round {at}", timeout=60)
    pid = int(m.group(1))
    survivors = [r for r in range(workers) if r != frozen]
    try:
        for rank in survivors:
            job.wait_for_line(rf"\[worker {rank}\] elastic: done rank {rank} workers "
                              rf"\[{', '.join(map(str, survivors))}\] epoch 1 num_workers 2",
                              timeout=60)
    finally:
        os.kill(pid, signal.SIGCONT)  # it wakes up, finds the job gone on, and fails
    code = job.wait(timeout=60)
    job.assert_no_leftovers()
    out = job.output
    assert code == 0, job.describe()
    for rank in survivors:
        for r in range(1, ROUNDS + 1):
            members = [w for w in range(workers) if w != frozen or r < at]
            value = r * sum(w + 1 for w in members)
            assert f"[worker {rank}] elastic: round {r} rank {rank} value {value} " \
                   f"members {len(members)}" in out, (rank, r, out)
    assert re.search(rf"\[scheduler\] .*worker {frozen} \(node \d+, [^)]*\) left the job: no "
                     rf"heartbeat for [\d.]+ s \(PS_HEARTBEAT_TIMEOUT=3.0 s\)", out), out
    # Awake, it fails (its scheduler connection was closed) and leaves too.
    assert re.search(rf"\[launcher\] worker {frozen} \(pid {pid}\) exited with status \d+; the "
                     rf"job goes on with 2 of 3 workers", out), out
    assert "the push of a worker the job went on without was taken" not in out, out
