"""Elastic collectives on the multi-host bed (docs/elastic.md "Elastic
collectives", docs/netbed.md): five hosts in network namespaces, the
scheduler on h1 and a worker on each of h2..h5, every process started
inside its host with the DMLC contract and TANDEM_MIN_WORKERS=3, as a
cluster manager would start it; the same-host copy only between workers
that announced one address (none here), so every piece crosses the shaped
links. Worker 3 leaves:

- killed (SIGKILL) before an allreduce round: the survivors' allreduce
  raises MembershipChanged at once, they regroup and go on;
- its host's link cut while it holds before a round: no connection closes,
  the survivors' allreduce waits, and after PS_HEARTBEAT_TIMEOUT the
  scheduler lets the job go on without it; once the cut is over the
  worker, which is no member any more, fails.

The survivors check every round's sum against the closed form of its
members (python_workers/elastic_allreduce_worker.py) and end normally;
nothing is left running and the namespaces are removed."""

from __future__ import annotations

import re

import netbed
from bed_job import BedJob
from python_job import PYTHON, WORKERS_DIR, python_env
from test_elastic_netbed import assert_others_logged_leave, cut_until_done
from test_faults_netbed import HEARTBEATS, finish

ROUNDS = 20
AT = 8  # the round worker 3 does not reach
VICTIM = 3
PLACEMENT = [(1, "scheduler"), (2, "worker"), (3, "worker"), (4, "worker"), (5, "worker")]


def start(bed: netbed.NetBed, tandem_bin_dir, worker_args: list[str]) -> BedJob:
    env = {**HEARTBEATS, **python_env(tandem_bin_dir), "TANDEM_MIN_WORKERS": "3",
           "TANDEM_COLLECTIVE_SAME_HOST_COPY": "host"}
    argv_for = {
        "scheduler": [str(tandem_bin_dir / "tandem"), "scheduler"],
        "worker": [PYTHON, str(WORKERS_DIR / "elastic_allreduce_worker.py"), "--rounds",
                   str(ROUNDS), "--elements", "50000", *worker_args],
    }
    return BedJob(bed, PLACEMENT, env=env, argv_for=argv_for)


def check_survivors(job: BedJob, victim) -> None:
    """Every survivor's rounds were exact (it checks them and prints each),
    it regrouped once, resuming at round AT (or AT-1), and it exited 0. The
    survivors keep their worker ranks as ranks: worker 3 is the last."""
    for p in job.procs:
        if p is victim:
            continue
        assert p.returncode == 0, f"{p.name()} exited {p.returncode}\n{job.describe()}"
        if p.role != "worker":
            continue
        worker = p.rank()
        for r in range(1, ROUNDS + 1):
            # Round AT-1 was under way when worker 3, done with it, left:
            # the survivors completed it with it, or went back and redid it
            # without it (the resume point is the lowest any had not done).
            sizes = [4] if r < AT - 1 else [3] if r >= AT else [4, 3]
            done = [size for size in sizes
                    if f"elastic: round {r} rank {worker} size {size} sum-ok" in p.output]
            assert done, f"{p.name()} round {r}\n{job.describe()}"
        assert re.search(rf"elastic: regrouped rank \d epoch 1 workers \[0, 1, 2\] size 3 "
                         rf"resume ({AT - 1}|{AT}) ", p.output), job.describe()
        assert f"elastic: done worker {worker} rank {worker} size 3 epoch 1" in p.output, \
            job.describe()


def victim_of(job: BedJob):
    job.wait_for(r"joined: worker", count=4, timeout=60, role="worker")
    return next(p for p in job.procs if p.role == "worker" and p.rank() == VICTIM)


def test_a_killed_worker_leaves_and_the_survivors_regroup(netbed, tandem_bin_dir):
    bed = netbed(5)
    job = start(bed, tandem_bin_dir, ["--leave", f"{VICTIM}:{AT}"])
    try:
        victim = victim_of(job)
        assert job.wait_all(timeout=120), job.describe()
        assert victim.returncode == -9, job.describe()
        check_survivors(job, victim)
        assert_others_logged_leave(job, victim, rf"{re.escape(victim.host.ip)}:\d+",
                                   "its connection closed")
    finally:
        finish(bed, job)


def test_a_cut_off_worker_is_left_behind_and_the_survivors_regroup(netbed, tandem_bin_dir,
                                                                   tmp_path):
    bed = netbed(5)
    release = tmp_path / "release"
    job = start(bed, tandem_bin_dir, ["--hold", f"{VICTIM}:{AT}:{release}"])
    try:
        victim = victim_of(job)
        job.wait_for(rf"elastic: worker {VICTIM} holds before round {AT}", timeout=120)
        cut_until_done(bed, job, victim, release, r"elastic: done worker")
        assert job.wait_all(timeout=60), job.describe()
        check_survivors(job, victim)
        assert victim.returncode not in (0, None), job.describe()
        assert_others_logged_leave(job, victim, "[^)]*", "no heartbeat")
    finally:
        finish(bed, job)
