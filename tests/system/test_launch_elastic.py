"""Elastic worker counts through `tandem launch --workers MIN:MAX` on loopback
(docs/launch.md, "Elastic worker counts"): a parameter-server job whose
worker is killed goes on with the others and succeeds, with the launcher's
lines saying so; a second loss below the minimum tears the job down, and
nothing is left either way.

The survivors of a failed job can exit within a millisecond of the killed
worker, and ends reaped in one sweep are reported in start order
(docs/launch.md, "Restarts"), so the failure lines may name a survivor
instead of the killed worker: the assertions below hold either way."""

from __future__ import annotations

import os
import re
import signal

CHECK = ["--serve-roles", "--barriers", "100", "--sleep-ms", "50"]


def start(launch, tandem_bin_dir, workers: str):
    job = launch.start(4, 1, [tandem_bin_dir / "cluster_check", *CHECK],
                       extra_args=["--workers", workers, "--teardown-grace", "5"])
    pids = {}
    for i in range(4):
        m = job.wait_for_line(rf"\[worker {i}\] cluster_check: pid=(\d+)", timeout=60)
        pids[i] = int(m.group(1))
    job.wait_for_line(r"\[scheduler\] .*all 6 nodes registered", timeout=60)
    return job, pids


def test_a_killed_worker_leaves_and_the_job_succeeds(launch, tandem_bin_dir):
    job, pids = start(launch, tandem_bin_dir, "3:4")
    assert re.search(r"\[launcher\] job \S+: scheduler at \S+, 1 server, 4 workers \(going on "
                     r"with 3 or more: --workers 3:4\)", job.output), job.describe()
    os.kill(pids[3], signal.SIGKILL)
    code = job.wait(timeout=120)
    assert code == 0, job.describe()
    out = job.output
    assert re.search(r"\[launcher\] worker 3 \(pid \d+\) killed by signal 9 \(SIGKILL\); the job "
                     r"goes on with 3 of 4 workers \(--workers 3:4\)", out), job.describe()
    # The scheduler saw it leave too (TANDEM_MIN_WORKERS=3 reached it).
    assert re.search(r"\[scheduler\] .*worker 3 .*left the job", out), job.describe()
    last = [text for stream, text in job.lines if text.startswith("[launcher]")][-1]
    assert re.fullmatch(r"\[launcher\] job succeeded with 3 of 4 workers \(--workers 3:4\); left "
                        r"the job: worker 3 \(pid \d+\) killed by signal 9 \(SIGKILL\)",
                        last), job.describe()
    for i in range(3):
        assert re.search(rf"\[launcher\] worker {i} \(pid \d+\) exited with status 0", out), \
            job.describe()
    job.assert_no_leftovers()


def test_a_loss_below_the_minimum_tears_the_job_down(launch, tandem_bin_dir):
    job, pids = start(launch, tandem_bin_dir, "3:4")
    os.kill(pids[2], signal.SIGKILL)
    job.wait_for_line(r"\[launcher\] worker 2 .* the job goes on with 3 of 4 workers", timeout=30)
    os.kill(pids[3], signal.SIGKILL)
    code = job.wait(timeout=120)
    assert code != 0, job.describe()
    out = job.output
    assert re.search(r"\[launcher\] .*; tearing down the job", out), job.describe()
    assert re.search(r"\[launcher\] worker 3 \(pid \d+\) killed by signal 9 \(SIGKILL\)", out), \
        job.describe()
    last = [text for stream, text in job.lines if text.startswith("[launcher]")][-1]
    assert last.startswith("[launcher] job failed: "), job.describe()
    assert "2 of 4 workers remained, below the minimum of 3 (--workers 3:4); had left the job: " \
           "worker 2 (pid" in last, job.describe()
    job.assert_no_leftovers()
    for pid in pids.values():
        try:
            os.kill(pid, 0)
            raise AssertionError(f"pid {pid} is still there\n{job.describe()}")
        except ProcessLookupError:
            pass


def test_without_a_range_a_killed_worker_fails_the_job(launch, tandem_bin_dir):
    # --workers 4 is -n 4: no TANDEM_MIN_WORKERS, every loss fails the job.
    job, pids = start(launch, tandem_bin_dir, "4")
    os.kill(pids[3], signal.SIGKILL)
    code = job.wait(timeout=120)
    assert code != 0, job.describe()
    assert re.search(r"\[launcher\] .*; tearing down the job", job.output), job.describe()
    assert re.search(r"\[launcher\] worker 3 \(pid \d+\) killed by signal 9 \(SIGKILL\)",
                     job.output), job.describe()
    assert "goes on" not in job.output and "below the minimum" not in job.output, \
        job.describe()
    job.assert_no_leftovers()
