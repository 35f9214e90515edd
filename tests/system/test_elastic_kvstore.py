"""The parameter server in an elastic job through `tandem launch --workers
MIN:MAX` (docs/elastic.md): workers killed during dist_sync rounds leave the
job, the servers complete every later round with the workers that remain,
and the survivors' pulled values equal the closed form of exactly those
workers' pushes (tests/system/python_workers/elastic_rounds_worker.py checks
every value). The job succeeds; nothing is left running."""

from __future__ import annotations

import re

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
