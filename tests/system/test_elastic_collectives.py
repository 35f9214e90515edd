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


def _replay(workers: int, steps: int, dim: int, leave: dict[int, int],
            joins: dict[int, int] | None = None) -> list[float]:
    """elastic_train's training over each step's members: worker 0's
    starting weights, the mean of the members' gradients, momentum SGD at
    0.01 x the members' count. `joins`: worker -> the step from which a
    worker that took its place trains."""
    joins = joins or {}
    w = [float(i % 7) - 3.0 for i in range(dim)]
    v = [0.0] * dim
    for step in range(steps):
        members = [m for m in range(workers)
                   if leave.get(m, steps + 1) > step or joins.get(m, steps + 1) <= step]
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


def _weights(out: str, worker: int, rank: int, size: int, steps: int, resets: int) -> list[float]:
    found = re.search(rf"elastic_train: worker {worker} done rank {rank} size {size} step "
                      rf"{steps} resets {resets} weights ([-0-9.e ]+)", out)
    assert found, (worker, out)
    return [float(x) for x in found.group(1).split()]


def test_cpp_elastic_run_admits_a_worker_that_joins(launch, tandem_bin_dir):
    """A worker that joins the running job: worker 2 of 3 (tandem launch -s 0
    --workers 2:3) SIGKILLs itself at step 4; the test then starts a new
    elastic_train with a survivor's environment and DMLC_WORKER_ID=2, as a
    cluster manager restarting the pod would. The survivors check for it at
    each commit and hold at step 7 until it is admitted (--wait-join-at 7):
    it trains from the step of the first commit after it registered, 7 at
    the latest. It takes worker 2's place and syncs worker 0's state; all
    three end with the replay (steps before the loss over 3 workers, then 2
    until it joined, then 3; relative 1e-12), and nothing is left running."""
    steps, dim = 12, 24
    argv = [tandem_bin_dir / "elastic_train", "--steps", str(steps), "--dim", str(dim),
            "--leave", "2:4", "--wait-join-at", "7"]
    job = launch.start(3, 0, argv, extra_args=["--workers", "2:3"])
    job.wait_for_line(r"\[worker 0\] elastic_train: worker 0 trains from step 0")
    env = dict(next(p for p in job.role_processes("worker")
                    if p.env.get("DMLC_WORKER_ID") == "0").env)
    job.wait_for_line(r"elastic_train: worker 2 leaves at step 4")
    env["DMLC_WORKER_ID"] = "2"
    joiner = launch.start_command([str(tandem_bin_dir / "elastic_train"), "--steps", str(steps),
                                   "--dim", str(dim)], env=env)
    code = job.wait(timeout=120)
    assert code == 0, job.describe()
    assert joiner.wait(timeout=30) == 0, joiner.describe()
    job.assert_no_leftovers()
    joiner.assert_no_leftovers()
    out, joined = job.output, joiner.output
    assert "joined the running job: worker 2" in joined, joined
    start = re.search(r"elastic_train: worker 2 trains from step (\d+) rank 2 size 3", joined)
    assert start, joined
    joined_from = int(start.group(1))
    assert 4 <= joined_from <= 7, joined
    expected = _replay(3, steps, dim, {2: 4}, {2: joined_from})
    finals = {}
    for w in (0, 1):
        assert (f"[worker {w}] elastic_train: worker {w} trains from step {joined_from} rank {w} "
                f"size 3") in out, out
        done = re.search(rf"elastic_train: worker {w} done rank {w} size 3 step {steps} "
                         rf"resets (\d) weights", out)
        assert done, out
        # The last reset is the admission's (one reset when the regroup of the
        # loss admitted it too).
        resets = int(done.group(1))
        assert resets in (1, 2), out
        assert (f"[worker {w}] elastic_train: worker {w} reset {resets} rank {w} size 3 "
                f"members [0,1,2]") in out, out
        finals[w] = _weights(out, w, w, 3, steps, resets)
    finals[2] = _weights(joined, 2, 2, 3, steps, 0)
    for w, got in finals.items():
        assert len(got) == dim, got
        for i, (g, e) in enumerate(zip(got, expected)):
            assert abs(g - e) <= 1e-12 * max(1.0, abs(e)), (w, i, g, e)
    assert re.search(r"\[launcher\] worker 2 \(pid \d+\) killed by signal 9", out), out
    assert re.search(r"joined the job in the place of a departed worker; 3 of 3 workers "
                     r"\(membership epoch 2\)", out), out


def test_torch_elastic_run_admits_a_worker_that_joins(launch, tandem_bin_dir):
    """tandem.torch.elastic with a worker that joins: worker 2 of 3 dies
    during step 4's backward; the test starts a new elastic_torch_worker.py
    with a survivor's environment and DMLC_WORKER_ID=2; the survivors' commit
    of step 7 admits it (tandem.check_joins()). It takes worker 2's place,
    gets the model, the optimizer's momentum, the step and the history by
    sync(), and every worker ends with the same weights, equal to the NumPy
    replay of the committed steps (relative 1e-10)."""
    steps = 12
    args = ["--steps", str(steps), "--wait-join-at", "7", "--places", "3"]
    job = launch.start(3, 0, worker("elastic_torch_worker.py") + args + ["--leave", "2:4"],
                       extra_args=["--workers", "2:3"],
                       launcher_env=python_env(tandem_bin_dir))
    job.wait_for_line(r"\[worker 0\] elastic-torch: worker 0 trains from step 0")
    env = dict(next(p for p in job.role_processes("worker")
                    if p.env.get("DMLC_WORKER_ID") == "0").env)
    job.wait_for_line(r"elastic-torch: worker 2 leaves during step 4")
    env["DMLC_WORKER_ID"] = "2"
    joiner = launch.start_command(worker("elastic_torch_worker.py") + args, env=env)
    code = job.wait(timeout=120)
    assert code == 0, job.describe()
    assert joiner.wait(timeout=60) == 0, joiner.describe()
    job.assert_no_leftovers()
    joiner.assert_no_leftovers()
    pattern = (r"elastic-torch: worker (\d) replay ok max-diff \S+ steps (\d+) restores (\d+) "
               r"weights (\w+) history \[([0-9, ]+)\]")
    found = re.findall(pattern, job.output) + re.findall(pattern, joiner.output)
    assert sorted(int(w) for w, *_ in found) == [0, 1, 2], (job.output, joiner.output)
    assert len({digest for _, _, _, digest, _ in found}) == 1, found  # the same weights
    start = re.search(r"elastic-torch: worker 2 trains from step (\d+) rank 2 size 3",
                      joiner.output)
    assert start, joiner.output
    # Admitted at the first commit after it registered, 7 at the latest.
    joined_from = int(start.group(1))
    assert 4 <= joined_from <= 7, joiner.output
    for w, done, restores, _, history in found:
        sizes = [int(v) for v in history.split(", ")]
        assert int(done) == steps and len(sizes) == steps, found
        # The survivors restore for the departure and for the admission (once
        # when the regroup of the loss admitted it too).
        assert int(restores) in ((0,) if w == "2" else (1, 2)), found
        assert sizes[:4] == [3] * 4 and sizes[4] in (2, 3), sizes
        assert sizes[5:joined_from] == [2] * (joined_from - 5), sizes
        assert sizes[joined_from:] == [3] * (steps - joined_from), sizes


def test_launcher_replaces_a_worker_that_left(launch, tandem_bin_dir):
    """tandem launch --max-restarts in an elastic job without servers: worker
    2 of 3 SIGKILLs itself at step 4; the launcher starts a replacement with
    worker 2's environment (TANDEM_RESTART_COUNT 1) 0.2 s later, instead of
    restarting the job; the survivors admit it at a commit (step 7 at the
    latest). All three end with the replay within 1e-12, the launcher says
    what it did, and nothing is left running."""
    steps, dim = 12, 24
    argv = [tandem_bin_dir / "elastic_train", "--steps", str(steps), "--dim", str(dim),
            "--leave", "2:4", "--wait-join-at", "7"]
    job = launch.start(3, 0, argv, extra_args=["--workers", "2:3", "--max-restarts", "1",
                                               "--restart-delay", "0.2"])
    code = job.wait(timeout=120)
    job.assert_no_leftovers()
    out = job.output
    assert code == 0, job.describe()
    start = re.search(r"\[worker 2\] elastic_train: worker 2 trains from step ([1-9]\d*) rank 2 "
                      r"size 3", out)
    assert start, out
    joined_from = int(start.group(1))
    assert 4 <= joined_from <= 7, out
    expected = _replay(3, steps, dim, {2: 4}, {2: joined_from})
    for w in (0, 1, 2):
        resets = 0 if w == 2 else int(re.search(
            rf"elastic_train: worker {w} done rank {w} size 3 step {steps} resets (\d)",
            out).group(1))
        got = _weights(out, w, w, 3, steps, resets)
        assert len(got) == dim, got
        for i, (g, e) in enumerate(zip(got, expected)):
            assert abs(g - e) <= 1e-12 * max(1.0, abs(e)), (w, i, g, e)
    killed = re.search(r"\[launcher\] worker 2 \(pid (\d+)\) killed by signal 9 \(SIGKILL\); "
                       r"the job goes on with 2 of 3 workers \(--workers 2:3\)", out)
    assert killed, out
    assert ("0 servers, 3 workers (going on with 2 or more: --workers 2:3; a worker that leaves "
            "is replaced, once at most)") in out, out
    assert ("[launcher] starting a replacement for worker 2 in 0.2 s (replacement 1 of 1); it "
            "joins the running job at the workers' next commit") in out, out
    started = re.search(r"\[launcher\] started the replacement for worker 2 \(pid (\d+), "
                        r"replacement 1 of 1\)", out)
    assert started and started.group(1) != killed.group(1), out
    assert f"[launcher] worker 2 (pid {started.group(1)}) exited with status 0" in out, out
    assert (f"[launcher] job succeeded with 3 of 3 workers (--workers 2:3) after 1 replacement; "
            f"left the job: worker 2 (pid {killed.group(1)}) killed by signal 9 (SIGKILL)") in out
    assert "restarting the job" not in out, out
    assert "joined the job in the place of a departed worker; 3 of 3 workers" in out, out


def test_below_the_minimum_the_job_waits_for_the_replacements(launch, tandem_bin_dir):
    """Three of four workers (--workers 3:4) SIGKILL themselves at step 4:
    the losses leave 1 or 2, below the minimum of 3. With --max-restarts the
    launcher replaces all three and the job waits for them instead of
    failing: the survivors' regroup is held until one replacement joins,
    and while still below, again until another does (one admission per
    regroup), so no step runs below the minimum: two replacements train
    from step 4, the third from a commit by step 7. Every
    worker ends on the replay of each step's members (1e-12), the launcher
    and the scheduler say the job waited, and nothing is left running."""
    steps, dim = 12, 24
    argv = [tandem_bin_dir / "elastic_train", "--steps", str(steps), "--dim", str(dim),
            "--leave", "1:4", "--leave", "2:4", "--leave", "3:4", "--wait-join-at", "7"]
    job = launch.start(4, 0, argv, extra_args=["--workers", "3:4", "--max-restarts", "3",
                                               "--restart-delay", "0.2",
                                               "--elastic-timeout", "60"])
    code = job.wait(timeout=180)
    job.assert_no_leftovers()
    out = job.output
    assert code == 0, job.describe()
    # A replacement's first start (a later one follows each reset, and the
    # worker it replaced may have started again at step 4 before it died).
    joins = {}
    for w in (1, 2, 3):
        first = re.search(rf"\[worker {w}\] elastic_train: worker {w} trains from step "
                          rf"(\d+) rank \d size \d \(joined\)", out)
        assert first, (w, out)
        joins[w] = int(first.group(1))
    # The survivor waited for two replacements before its next step.
    assert sorted(joins.values())[:2] == [4, 4], joins
    assert 4 <= max(joins.values()) <= 7, joins
    expected = _replay(4, steps, dim, {1: 4, 2: 4, 3: 4}, joins)
    for w in range(4):
        found = re.search(rf"elastic_train: worker {w} done rank \d size 4 step {steps} resets "
                          rf"\d+ weights ([-0-9.e ]+)", out)
        assert found, (w, out)
        got = [float(x) for x in found.group(1).split()]
        assert len(got) == dim, got
        for i, (g, e) in enumerate(zip(got, expected)):
            assert abs(g - e) <= 1e-12 * max(1.0, abs(e)), (w, i, g, e, joins)
    # How far below depends on how the leavers' deaths interleave with the
    # first admission (a leaver whose step barrier saw another's death
    # regroups and dies at the step again).
    assert re.search(r"\[launcher\] worker \d \(pid \d+\) killed by signal 9 \(SIGKILL\), "
                     r"which leaves [12] of 4 workers, below the minimum of 3 \(--workers 3:4\): "
                     r"the job waits up to 60 s for its replacement to join "
                     r"\(--elastic-timeout\)", out), out
    assert re.search(r"[12] of 4 workers remain, below the minimum of 3: the job waits for "
                     r"workers to join", out), out
    assert re.search(r"scheduler: back to 3 workers, the minimum, after \d+\.\d{3} s below it",
                     out), out
    assert "job succeeded with 4 of 4 workers (--workers 3:4) after 3 replacements" in out, out
    assert "restarting the job" not in out, out


def test_launcher_replaces_a_torch_worker_that_left(launch, tandem_bin_dir):
    """The same through tandem.torch.elastic: worker 2 of 3 dies during step
    4's backward; the launcher's replacement (--max-restarts 2) joins at a
    commit and syncs the model, the momentum, the step and the history from
    the survivors; every worker ends on the NumPy replay (1e-10) with the
    same weights, and the launcher made one replacement and no restart."""
    steps = 12
    args = ["--steps", str(steps), "--wait-join-at", "7", "--places", "3"]
    job = launch.start(3, 0, worker("elastic_torch_worker.py") + args + ["--leave", "2:4"],
                       extra_args=["--workers", "2:3", "--max-restarts", "2",
                                   "--restart-delay", "0.2"],
                       launcher_env=python_env(tandem_bin_dir))
    code = job.wait(timeout=120)
    job.assert_no_leftovers()
    out = job.output
    assert code == 0, job.describe()
    pattern = (r"elastic-torch: worker (\d) replay ok max-diff \S+ steps (\d+) restores (\d+) "
               r"weights (\w+) history \[([0-9, ]+)\]")
    found = re.findall(pattern, out)
    assert sorted(int(w) for w, *_ in found) == [0, 1, 2], out
    assert len({digest for _, _, _, digest, _ in found}) == 1, found
    start = re.search(r"\[worker 2\] elastic-torch: worker 2 trains from step ([1-9]\d*) rank 2 "
                      r"size 3", out)
    assert start, out
    assert 4 <= int(start.group(1)) <= 7, out
    for _, done, _, _, history in found:
        sizes = [int(v) for v in history.split(", ")]
        assert int(done) == steps and len(sizes) == steps, found
        assert sizes[int(start.group(1)):] == [3] * (steps - int(start.group(1))), sizes
    assert "started the replacement for worker 2 (pid " in out, out
    # tandem.joined_running_job(): only the replacement says True.
    told = re.findall(r"elastic-torch: worker (\d) joined_running_job (True|False)", out)
    assert sorted(told) == [("0", "False"), ("1", "False"), ("2", "False"), ("2", "True")], out
    assert "job succeeded with 3 of 3 workers (--workers 2:3) after 1 replacement" in out, out
    assert "restarting the job" not in out, out


ELASTIC_EPOCH = re.compile(r"\[worker 0\] epoch (\d+)/(\d+): loss ([0-9.]+) train accuracy "
                           r"([0-9.]+)% \((\d) workers\)")


def test_the_elastic_example_trains_through_a_replaced_worker(launch, tandem_bin_dir):
    """examples/pytorch_ddp/elastic_train.py as its docstring runs it
    (tandem launch -s 0 --workers 2:3 --max-restarts 1): the test SIGKILLs
    worker 2 once epoch 2 is reported; the others go on with 2 workers (the
    learning rate rescaled), the launcher's replacement joins, and the job
    ends with 3 workers: every epoch reported once, the loss of the last
    below the first, and nothing left running."""
    import os
    import signal
    from pathlib import Path
    from python_job import PYTHON
    script = Path(__file__).resolve().parents[2] / "examples" / "pytorch_ddp" / "elastic_train.py"
    epochs = 30
    job = launch.start(3, 0, [PYTHON, str(script), "--epochs", str(epochs), "--samples", "1024"],
                       extra_args=["--workers", "2:3", "--max-restarts", "1"],
                       launcher_env=python_env(tandem_bin_dir))
    job.wait_for_line(r"\[worker 0\] epoch 2/", timeout=120)
    (victim,) = [p for p in job.role_processes("worker") if p.env.get("DMLC_WORKER_ID") == "2"]
    os.kill(victim.pid, signal.SIGKILL)
    code = job.wait(timeout=240)
    job.assert_no_leftovers()
    out = job.output
    assert code == 0, job.describe()
    assert "[worker 0] worker 0: now rank 0 of 2 workers, learning rate 0.1" in out, out
    assert "[worker 2] worker 2: joined the running job" in out, out
    assert "[worker 0] worker 0: now rank 0 of 3 workers, learning rate 0.15" in out, out
    for w in range(3):
        assert f"[worker {w}] worker {w}: done as rank {w} of 3" in out, out
    reported = ELASTIC_EPOCH.findall(out)
    assert [int(e[0]) for e in reported] == list(range(1, epochs + 1)), out
    assert int(reported[-1][4]) == 3, out
    assert float(reported[-1][2]) < float(reported[0][2]), reported
    assert re.search(rf"\[launcher\] worker 2 \(pid {victim.pid}\) killed by signal 9", out), out
    assert "job succeeded with 3 of 3 workers (--workers 2:3) after 1 replacement" in out, out
