"""The main job with --elastic (docs/elastic.md, "The main job"): started by
`tandem launch --workers 2:3` with one server, or with --allreduce and no
server, it loses a worker to SIGKILL during its second epoch, goes on with
the other two (with --allreduce they regroup and take the lowest one's
weights and position), cuts the next epoch over them (the lowest that
remains printing), converges, and the launcher reports the job as
succeeded with 2 of 3 workers. Also the refusals of --elastic where it
cannot work.

Skipped with a reason when the trainer was not built (no LibTorch) or
Debian's dataset-fashion-mnist is not installed."""

from __future__ import annotations

import os
import re
import signal
import subprocess

import pytest

from conftest import processes_with_tag

# The trainer fixture skips with a reason when the trainer or the data set
# is missing.
from test_fashion_mnist import trainer  # noqa: F401,E402  (a pytest fixture)

TRAIN_LIMIT = 6000
BATCH = 64


def worker_pid(tag: str, rank: int) -> int:
    """The pid of worker `rank` of the job tagged `tag`."""
    for info in processes_with_tag(tag):
        if info.env.get("DMLC_ROLE") == "worker" and info.env.get("DMLC_WORKER_ID") == str(rank):
            return info.pid
    raise AssertionError(f"no worker {rank} among {[str(p) for p in processes_with_tag(tag)]}")


# dist_async's stale gradients need a smaller step than the default 0.05
# (with it this reduced run stays at chance, elastic or not).
@pytest.mark.parametrize("killed,mode,lr,threshold", [(2, "server_sgd", "0.05", 0.6),
                                                      (0, "server_sgd", "0.05", 0.6),
                                                      (1, "async", "0.01", 0.5),
                                                      (2, "allreduce", "0.05", 0.6),
                                                      (0, "allreduce", "0.05", 0.6)])
def test_a_killed_worker_leaves_and_training_goes_on(launch, trainer, killed, mode, lr, threshold):
    command = [trainer, "--elastic", "--threads", "1", "--epochs", "3", "--batch-size",
               str(BATCH), "--train-limit", str(TRAIN_LIMIT), "--test-limit", "1000", "--lr", lr]
    if mode == "allreduce":
        command += ["--allreduce"]
    else:
        command += ["--kvstore", "dist_async" if mode == "async" else "dist_sync"]
    job = launch.start(3, 0 if mode == "allreduce" else 1, command,
                       extra_args=["--workers", "2:3"])
    job.wait_for_line(r"epoch 1/3 done", timeout=120)
    pid = worker_pid(job.tag, killed)
    os.kill(pid, signal.SIGKILL)
    assert job.wait(timeout=180) == 0, job.describe()
    out = job.output
    survivors = [r for r in range(3) if r != killed]
    leader = survivors[0]
    assert re.search(rf"\[launcher\] worker {killed} \(pid {pid}\) killed by signal 9", out), out
    assert "job succeeded with 2 of 3 workers" in out, out
    # Every survivor's log names the change.
    for r in survivors:
        assert re.search(rf"\[worker {r}\] .*worker {killed} \(node \d+, [^)]*\) left the job", out), \
            out
    # The next epoch is cut over the two that remain: 6000 // 128 steps.
    m = re.search(rf"\[worker {leader}\] elastic: membership epoch 1: workers "
                  rf"\[{survivors[0]}, {survivors[1]}\] go on; epoch ([23]) is cut into "
                  rf"{TRAIN_LIMIT // (2 * BATCH)} steps of {2 * BATCH} \({BATCH} per worker\)", out)
    assert m, out
    if mode == "allreduce":
        # The survivors regrouped and took the leader's weights and position.
        assert re.search(rf"\[worker {leader}\] elastic: membership epoch 1: workers "
                         rf"\[{survivors[0]}, {survivors[1]}\] go on from step \d+ of epoch [23] "
                         rf"\(worker {leader}'s weights and position\)", out), out
    assert re.search(rf"\[worker {leader}\] elastic: workers \[{survivors[0]}, {survivors[1]}\] "
                     r"finished after 1 membership change \(3 workers started the job\)", out), out
    m = re.search(rf"\[worker {leader}\] final test accuracy: ([0-9.]+) after (\d+) steps", out)
    assert m, out
    # A reduced run, as the other trainer tests: a model that does not learn
    # stays at 0.10.
    assert float(m.group(1)) >= threshold, out
    job.assert_no_leftovers()


@pytest.mark.parametrize("killed", [2, 0])
def test_the_launchers_replacement_joins_the_allreduce_run(launch, trainer, killed):
    """--elastic --allreduce under tandem launch -s 0 --workers 2:3
    --max-restarts 1: a worker SIGKILLed in epoch 2 is replaced by the
    launcher; the new process is admitted after a step (the survivors check
    for joiners after every step), takes the leader's weights, momentum and
    position, trains the departed worker's part of the rest of the epoch and
    the next epoch over all three. The job ends with 3 of 3 workers after 1
    replacement, every worker at the same step count, and converges."""
    command = [trainer, "--elastic", "--allreduce", "--threads", "1", "--epochs", "3",
               "--batch-size", str(BATCH), "--train-limit", str(TRAIN_LIMIT), "--test-limit",
               "1000"]
    job = launch.start(3, 0, command, extra_args=["--workers", "2:3", "--max-restarts", "1",
                                                  "--restart-delay", "0.2"])
    job.wait_for_line(r"epoch 1/3 done", timeout=120)
    pid = worker_pid(job.tag, killed)
    os.kill(pid, signal.SIGKILL)
    assert job.wait(timeout=180) == 0, job.describe()
    out = job.output
    assert re.search(rf"\[launcher\] started the replacement for worker {killed} \(pid \d+, "
                     r"replacement 1 of 1\)", out), out
    assert (f"job succeeded with 3 of 3 workers (--workers 2:3) after 1 replacement; left the "
            f"job: worker {killed} (pid {pid}) killed by signal 9 (SIGKILL)") in out, out
    # The new process joined and took the leader's position, which the
    # members announce with the same step.
    joined = re.search(rf"\[worker {killed}\] elastic: worker {killed} joined the running job "
                       rf"\(membership epoch (\d+), workers \[0, 1, 2\]\); it trains from step "
                       rf"(\d+) of epoch ([23])", out)
    assert joined, out
    # Their state is the lowest worker's that trained with the others; the
    # new worker 0 leads once it shares it.
    source = 1 if killed == 0 else 0
    assert re.search(rf"\[worker \d\] elastic: membership epoch {joined.group(1)}: workers "
                     rf"\[0, 1, 2\] go on from step {joined.group(2)} of epoch {joined.group(3)} "
                     rf"\(worker {source}'s weights and position\)", out), out
    assert re.search(r"elastic: workers \[0, 1, 2\] finished after 2 membership changes \(3 "
                     r"workers started the job\)", out), out
    m = re.search(r"final test accuracy: ([0-9.]+) after (\d+) steps", out)
    assert m, out
    assert float(m.group(1)) >= 0.6, out
    job.assert_no_leftovers()


@pytest.mark.parametrize("args,refusal", [
    (["--allreduce", "--compression", "2bit"], r"--elastic --allreduce with --compression 2bit: "
                                               r"its per-worker state"),
    (["--kvstore", "local"], r"--elastic needs --allreduce or a dist --kvstore .*got --kvstore "
                             r"local"),
    (["--checkpoint-dir", "/nonexistent"], r"--elastic with --checkpoint-dir: the checkpoints do "
                                          r"not follow a change of workers yet"),
    (["--workload", "1,2"], r"--elastic with --workload"),
])
def test_elastic_refuses_what_it_cannot_follow(trainer, args, refusal):
    result = subprocess.run([str(trainer), "--elastic", *args], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2, result
    assert re.search(refusal, result.stderr), result.stderr
