"""Tandem's collectives in an elastic job through `tandem launch --workers
MIN:MAX` (docs/elastic.md, "Elastic collectives"): workers killed with
SIGKILL between allreduce rounds; the survivors' allreduce raises
tandem.MembershipChanged, they call tandem.regroup() and go on in a world
of the workers that remain, over the connections already open, and every
round's sum equals the closed form of exactly its members
(tests/system/python_workers/elastic_allreduce_worker.py checks every
element). The job succeeds; nothing is left running."""

from __future__ import annotations

import re

import pytest

from python_job import python_env, worker

ROUNDS = 8


@pytest.mark.parametrize("workers,minimum,leave", [
    (4, 3, {3: 4}),           # the last rank
    (4, 2, {0: 3, 2: 6}),     # rank 0 first, then another: epoch 2
])
def test_survivors_regroup_and_their_sums_stay_exact(launch, tandem_bin_dir, workers, minimum,
                                                     leave):
    argv = worker("elastic_allreduce_worker.py") + ["--rounds", str(ROUNDS)]
    for rank, round_ in leave.items():
        argv += ["--leave", f"{rank}:{round_}"]
    job = launch.start(workers, 0, argv, extra_args=["--workers", f"{minimum}:{workers}"],
                       launcher_env=python_env(tandem_bin_dir))
    code = job.wait(timeout=120)
    job.assert_no_leftovers()
    out = job.output
    assert code == 0, job.describe()
    survivors = [w for w in range(workers) if w not in leave]
    for position, w in enumerate(survivors):
        for r in range(1, ROUNDS + 1):
            # Rounds before the first change run over every worker, with the
            # worker's own rank; later ones over the members then.
            members = [m for m in range(workers) if leave.get(m, ROUNDS + 1) > r]
            rank = members.index(w)
            lines = re.findall(rf"\[worker {w}\] elastic: round {r} rank {rank} "
                               rf"size {len(members)} sum-ok", out)
            assert len(lines) == 1, (w, r, rank, len(members), out)
        assert f"[worker {w}] elastic: done worker {w} rank {position} size {len(survivors)} " \
               f"epoch {len(leave)}" in out, out
        # One regroup per change, each resuming at the round the leaver skipped.
        for epoch, (gone, round_) in enumerate(sorted(leave.items(), key=lambda kv: kv[1]), 1):
            remaining = [m for m in range(workers)
                         if leave.get(m, ROUNDS + 1) > round_]
            assert re.search(rf"\[worker {w}\] elastic: regrouped rank "
                             rf"{remaining.index(w)} epoch {epoch} workers "
                             rf"\[{', '.join(map(str, remaining))}\] size {len(remaining)} "
                             rf"resume {round_}", out), (w, epoch, out)
        # The C++ side's line of the change.
        assert re.search(rf"\[worker {w}\] .*collectives regrouped over workers", out), out
    for rank in leave:
        assert re.search(rf"\[launcher\] worker {rank} \(pid \d+\) killed by signal 9", out), out
    assert re.search(rf"\[launcher\] job succeeded with {len(survivors)} of {workers} workers",
                     out), out
