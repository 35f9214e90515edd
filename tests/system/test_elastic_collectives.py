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
            # Rounds before a change run over the members before it, later
            # ones over those after; the round just before a worker's
            # leaving round was under way when it left (done with it), so
            # the survivors completed it with it or redid it without.
            options = [[m for m in range(workers) if leave.get(m, ROUNDS + 1) > r]]
            if r + 1 in leave.values():
                options.append([m for m in range(workers) if leave.get(m, ROUNDS + 1) > r + 1])
            done = [members for members in options
                    if re.search(rf"\[worker {w}\] elastic: round {r} rank {members.index(w)} "
                                 rf"size {len(members)} sum-ok", out)]
            assert done, (w, r, options, out)
        assert f"[worker {w}] elastic: done worker {w} rank {position} size {len(survivors)} " \
               f"epoch {len(leave)}" in out, out
        # One regroup per change, each resuming at the round the leaver
        # skipped (or the one before, redone).
        for epoch, (gone, round_) in enumerate(sorted(leave.items(), key=lambda kv: kv[1]), 1):
            remaining = [m for m in range(workers)
                         if leave.get(m, ROUNDS + 1) > round_]
            assert re.search(rf"\[worker {w}\] elastic: regrouped rank "
                             rf"{remaining.index(w)} epoch {epoch} workers "
                             rf"\[{', '.join(map(str, remaining))}\] size {len(remaining)} "
                             rf"resume ({round_ - 1}|{round_}) ", out), (w, epoch, out)
        # The C++ side's line of the change.
        assert re.search(rf"\[worker {w}\] .*collectives regrouped over workers", out), out
    for rank in leave:
        assert re.search(rf"\[launcher\] worker {rank} \(pid \d+\) killed by signal 9", out), out
    assert re.search(rf"\[launcher\] job succeeded with {len(survivors)} of {workers} workers",
                     out), out


def test_torch_state_and_run_train_through_two_losses_exactly(launch, tandem_bin_dir):
    """tandem.torch.elastic.TorchState and run() with DistributedOptimizer
    (SGD with momentum, float64): worker 3 dies during step 10's backward,
    worker 0 (rank 0 until then) during step 20's. Every survivor ends with
    the same weights, equal (relative 1e-10) to a NumPy replay of the
    committed steps over their members (the worker checks it)."""
    steps, workers = 30, 4
    job = launch.start(workers, 0, worker("elastic_torch_worker.py") +
                       ["--steps", str(steps), "--leave", "3:10", "--leave", "0:20"],
                       extra_args=["--workers", f"2:{workers}"],
                       launcher_env=python_env(tandem_bin_dir))
    code = job.wait(timeout=120)
    job.assert_no_leftovers()
    out = job.output
    assert code == 0, job.describe()
    found = re.findall(r"\[worker (\d)\] elastic-torch: worker \d replay ok max-diff \S+ steps "
                       r"(\d+) restores (\d+) weights (\w+) history \[([0-9, ]+)\]", out)
    assert sorted(int(w) for w, *_ in found) == [1, 2], out
    assert len({digest for _, _, _, digest, _ in found}) == 1, found  # the same weights
    for _, done, restores, _, history in found:
        sizes = [int(v) for v in history.split(", ")]
        assert int(done) == steps and len(sizes) == steps, found
        assert int(restores) == 2, found  # one restore per change
        # Steps before a loss ran over every member; the step under way at a
        # loss counts it only where the lowest survivor completed it.
        assert sizes[:10] == [4] * 10 and sizes[11:20] == [3] * 9, sizes
        assert sizes[10] in (3, 4) and sizes[20] in (2, 3) and sizes[21:] == [2] * 9, sizes
    for w, members in ((0, "[0, 1, 2]"), (1, "[0, 1, 2]"), (1, "[1, 2]"), (2, "[1, 2]")):
        assert f"[worker {w}] elastic-torch: worker {w} regrouped: members {members}" in out, out
    assert "job succeeded with 2 of 4 workers" in out, out


def _replay(workers: int, steps: int, dim: int, leave: dict[int, int]) -> list[float]:
    """elastic_train's training over each step's members: worker 0's
    starting weights, the mean of the members' gradients, momentum SGD at
    0.01 x the members' count."""
    w = [float(i % 7) - 3.0 for i in range(dim)]
    v = [0.0] * dim
    for step in range(steps):
        members = [m for m in range(workers) if leave.get(m, steps + 1) > step]
        lr = 0.01 * len(members)
        for i in range(dim):
            total = sum(0.5 * w[i] + float((m + 1) * ((i + step) % 5)) - 2.0 for m in members)
            v[i] = 0.9 * v[i] + total / len(members)
            w[i] -= lr * v[i]
    return w


@pytest.mark.parametrize("workers,minimum,leave", [
    (4, 3, {3: 4}),           # the last rank
    (4, 2, {3: 4, 0: 8}),     # then rank 0: the lowest remaining worker leads
])
def test_cpp_elastic_run_trains_through_losses_exactly(launch, tandem_bin_dir, workers, minimum,
                                                       leave):
    """The C++ API (tandem/elastic.h) end to end: tests/programs/elastic_train
    runs tandem::elastic::Run with a TensorState; workers SIGKILL themselves at
    the start of a step. The survivors finish every step, saw one reset per
    change with the new world, and print weights equal to the replay of the
    steps over each step's members (relative 1e-12)."""
    steps, dim = 12, 24
    argv = [tandem_bin_dir / "elastic_train", "--steps", str(steps), "--dim", str(dim)]
    for w, step in leave.items():
        argv += ["--leave", f"{w}:{step}"]
    job = launch.start(workers, 0, argv, extra_args=["--workers", f"{minimum}:{workers}"])
    code = job.wait(timeout=120)
    job.assert_no_leftovers()
    out = job.output
    assert code == 0, job.describe()
    expected = _replay(workers, steps, dim, leave)
    survivors = [w for w in range(workers) if w not in leave]
    for position, w in enumerate(survivors):
        found = re.search(rf"\[worker {w}\] elastic_train: worker {w} done rank {position} size "
                          rf"{len(survivors)} step {steps} resets {len(leave)} weights ([-0-9.e ]+)",
                          out)
        assert found, (w, out)
        got = [float(x) for x in found.group(1).split()]
        assert len(got) == dim, got
        for i, (g, e) in enumerate(zip(got, expected)):
            assert abs(g - e) <= 1e-12 * max(1.0, abs(e)), (w, i, g, e)
        for reset, (gone, step) in enumerate(sorted(leave.items(), key=lambda kv: kv[1]), 1):
            remaining = [m for m in range(workers) if leave.get(m, steps + 1) > step]
            assert (f"[worker {w}] elastic_train: worker {w} reset {reset} rank "
                    f"{remaining.index(w)} size {len(remaining)} members "
                    f"[{','.join(map(str, remaining))}]") in out, (w, reset, out)
    for w in leave:
        assert re.search(rf"\[launcher\] worker {w} \(pid \d+\) killed by signal 9", out), out
    assert f"job succeeded with {len(survivors)} of {workers} workers" in out, out
