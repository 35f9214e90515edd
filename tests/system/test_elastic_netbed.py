"""Elastic parameter-server jobs on the multi-host bed (docs/elastic.md,
docs/netbed.md): six hosts in network namespaces, the scheduler on h1, a
server on each of h2 and h3, a worker on each of h4, h5, h6 and h1, every
process started inside its host with the DMLC contract and
TANDEM_MIN_WORKERS=3, as a cluster manager would start it. Worker 3 leaves:

- killed (SIGKILL) before a round: the others' rounds go on at once;
- its host's link cut while it waits before a round: the scheduler stops
  hearing it, and after PS_HEARTBEAT_TIMEOUT the job goes on without it;
  once the cut is over the worker, which found its scheduler gone, fails.

The survivors check every pulled value against the closed form of the
workers in that round (python_workers/elastic_rounds_worker.py) and end
normally; nothing is left running and the namespaces are removed."""

from __future__ import annotations

import re
import time

import pytest

import netbed
from bed_job import BedJob
from python_job import PYTHON, WORKERS_DIR, python_env
from test_faults_netbed import HB_TIMEOUT, HEARTBEATS, PLACEMENT, finish

ROUNDS = 30
AT = 10  # the round worker 3 does not reach
VICTIM = 3
MIN_WORKERS = 3


def job_env(tandem_bin_dir) -> dict[str, str]:
    """Short heartbeats, the build's Python package (or a skip, before any bed
    is made), the minimum, and the big key split across the servers."""
    return {**HEARTBEATS, **python_env(tandem_bin_dir), "TANDEM_MIN_WORKERS": str(MIN_WORKERS),
            "MXNET_KVSTORE_BIGARRAY_BOUND": "100"}


def start(bed: netbed.NetBed, env: dict[str, str], tandem_bin_dir,
          worker_args: list[str]) -> BedJob:
    tandem = str(tandem_bin_dir / "tandem")
    argv_for = {
        "scheduler": [tandem, "scheduler"],
        "server": [tandem, "server"],
        "worker": [PYTHON, str(WORKERS_DIR / "elastic_rounds_worker.py"), "--rounds",
                   str(ROUNDS), *worker_args],
    }
    return BedJob(bed, PLACEMENT, env=env, argv_for=argv_for)


def check_survivors(job: BedJob, survivors_ranks: list[int]) -> None:
    """Every survivor printed each round's closed form and its last line, and
    exited 0; so did the scheduler and the servers."""
    for p in job.procs:
        if p.role == "worker" and p.rank() == VICTIM:
            continue
        assert p.returncode == 0, f"{p.name()} exited {p.returncode}\n{job.describe()}"
        if p.role != "worker":
            continue
        rank = p.rank()
        for r in range(1, ROUNDS + 1):
            members = [w for w in range(4) if w != VICTIM or r < AT]
            value = r * sum(w + 1 for w in members)
            assert f"elastic: round {r} rank {rank} value {value} members {len(members)}" \
                in p.output, f"{p.name()} round {r}\n{job.describe()}"
        assert re.search(rf"elastic: done rank {rank} workers "
                         rf"\[{', '.join(map(str, survivors_ranks))}\] epoch 1 num_workers 3",
                         p.output), job.describe()


def victim_of(job: BedJob):
    job.wait_for(r"joined: worker", count=4, timeout=60, role="worker")
    victim = next(p for p in job.procs if p.role == "worker" and p.rank() == VICTIM)
    assert victim.host.name != job.scheduler_host.name, \
        f"worker {VICTIM} shares the scheduler's host\n{job.describe()}"
    return victim


def cut_until_done(bed: netbed.NetBed, job: BedJob, victim, release, done: str) -> None:
    """Cuts the held victim's host until the 3 others printed `done`, which
    must take at least the heartbeat timeout (the scheduler lets the job go
    on without it only then); restores the host and releases the victim."""
    bed.cut(victim.host)
    cut_at = time.monotonic()
    try:
        done_at = job.wait_for(done, count=3, timeout=120, role="worker")
        took = done_at - cut_at
        print(f"\nworker {victim.rank()}'s host cut: the others finished {took:.2f} s later "
              f"(PS_HEARTBEAT_TIMEOUT={HB_TIMEOUT} s)")
        assert took >= HB_TIMEOUT - 1, job.describe()
    finally:
        bed.restore(victim.host)
    release.touch()


def assert_others_logged_leave(job: BedJob, victim, address: str, reason: str) -> None:
    """Every process but the victim logged its departure: the victim's
    worker rank at `address` (a regular expression) left the job for
    `reason`."""
    pattern = rf"worker {victim.rank()} \(node \d+, {address}\) left the job: {reason}"
    for p in job.procs:
        if p is not victim:
            assert re.search(pattern, p.output), f"{p.name()}\n{job.describe()}"


def test_a_killed_worker_leaves_and_the_rounds_stay_exact(netbed, tandem_bin_dir):
    env = job_env(tandem_bin_dir)
    bed = netbed(6)
    job = start(bed, env, tandem_bin_dir, ["--leave", f"{VICTIM}:{AT}"])
    try:
        victim = victim_of(job)
        assert job.wait_all(timeout=120), job.describe()
        assert victim.returncode == -9, job.describe()
        check_survivors(job, [0, 1, 2])
        assert_others_logged_leave(job, victim, rf"{re.escape(victim.host.ip)}:\d+",
                                   "its connection closed")
    finally:
        finish(bed, job)


def test_a_cut_off_worker_is_left_behind_after_the_heartbeat_timeout(netbed, tandem_bin_dir,
                                                                     tmp_path):
    env = job_env(tandem_bin_dir)
    bed = netbed(6)
    release = tmp_path / "release"
    job = start(bed, env, tandem_bin_dir, ["--hold", f"{VICTIM}:{AT}:{release}"])
    try:
        victim = victim_of(job)
        job.wait_for(rf"elastic: rank {VICTIM} holds before round {AT}", timeout=120)
        cut_until_done(bed, job, victim, release, r"elastic: done rank")
        assert job.wait_all(timeout=60), job.describe()
        check_survivors(job, [0, 1, 2])
        assert victim.returncode not in (0, None), job.describe()
        assert "lost the scheduler" in victim.output, job.describe()
        assert "the push of a worker the job went on without was taken" not in victim.output
        assert_others_logged_leave(job, victim, "[^)]*", "no heartbeat")
    finally:
        finish(bed, job)
