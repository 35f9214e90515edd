"""Faults on purpose, on the multi-host bed (netbed.py, bed_job.py): tandem
either survives them with exact results or every process reports them and
exits. docs/reliability.md has the table these tests measure.

Every process runs inside its host (a network namespace) with the plain DMLC
environment, as a cluster manager would start it. Each test ends by checking
that no process it started is alive and no process is left in the bed's
namespaces, then removes the bed and checks that its namespaces are gone.

- packet loss on the bridge (nftables, 2 % and 5 %) with PS_RESEND=1: the
  parameter server's dist_sync scenario gives its exact closed-form numbers;
- kill -9 of a worker, a server or the scheduler at a seeded random moment
  during push/pull rounds (TANDEM_FAULT_SEED picks other ones): every survivor exits non-zero within the heartbeat
  timeout plus a few seconds, naming the lost node (role, rank and its host's
  address); the detection times are printed;
- a link cut shorter than the heartbeat timeout: the job finishes exactly;
  longer: it fails as above, naming the cut-off worker;
- SIGSTOP of a worker (a frozen process: only heartbeats can tell): the
  same, after the heartbeat timeout;
- a soak of 8 workers and 2 servers with the resident memory of every process
  sampled (TANDEM_SOAK_SECONDS, default 60, makes it longer).

Heartbeats are short (PS_HEARTBEAT_INTERVAL=0.5, PS_HEARTBEAT_TIMEOUT=4) so
that the file runs in a few minutes.
"""

from __future__ import annotations

import os
import random
import re
import signal
import statistics
import time

import pytest

import netbed
from bed_job import BedJob, BedProcess
from test_kvstore_launch import LINE, SERVERS, WORKERS, check_sync_scenario

HB_INTERVAL = 0.5
HB_TIMEOUT = 4.0
# What "within the heartbeat timeout plus a few seconds" allows: the
# timeout, one heartbeat interval, and the scheduler's 3 s wait for notices
# to reach the others before it exits.
DETECTION_SLACK = 5.0
HEARTBEATS = {"PS_HEARTBEAT_INTERVAL": str(HB_INTERVAL), "PS_HEARTBEAT_TIMEOUT": str(HB_TIMEOUT)}
# Keys above this many elements are split across the servers.
SPLIT = {"MXNET_KVSTORE_BIGARRAY_BOUND": "100000"}

# Six hosts: the scheduler alone on h1 (with worker 4's process), one server
# on each of h2 and h3, one worker on each of h4..h6 (and h1). A kill or a cut
# of a worker's or server's host then names an address of its own.
PLACEMENT = [(1, "scheduler"), (2, "server"), (3, "server"), (4, "worker"), (5, "worker"),
             (6, "worker"), (1, "worker")]
ROUND_OK = r"kv_rounds: rank=\d+ round=(\d+) ok"
RESEND_LABEL = {False: "", True: " (PS_RESEND=1)"}


def job_env(resend: bool = False, **overrides: str) -> dict[str, str]:
    """The fault jobs' extra environment: short heartbeats, split big keys and,
    with `resend`, reliable delivery."""
    env = {**HEARTBEATS, **SPLIT, **overrides}
    if resend:
        env["PS_RESEND"] = "1"
    return env


def fault_seed(default: int) -> int:
    """The seed of a test's random choices: TANDEM_FAULT_SEED when set (to try
    other moments and victims), else the test's own; always printed."""
    return int(os.environ.get("TANDEM_FAULT_SEED", default))


def finish(bed: netbed.NetBed, job: BedJob) -> None:
    """Every test's end: nothing of the job alive, then the bed removed entirely."""
    job.stop()
    left = job.leftovers()
    namespaces = [h.netns for h in bed.hosts] + [bed.bridge_netns]
    bed.destroy()
    assert not left, "left behind: " + "; ".join(left)
    remaining = sorted(set(namespaces) & set(netbed.list_namespaces()))
    assert not remaining, f"namespaces left: {remaining}"


def endless_rounds(bin_dir) -> list[str]:
    """kv_rounds until a fault ends it: 1000 small and 200000 split elements
    a round, 20 ms apart, a progress line every 5 rounds."""
    return [str(bin_dir / "kv_rounds"), "--rounds", "1000000", "--small", "1000", "--big",
            "200000", "--pause-ms", "20", "--report-every", "5"]


def names_node(output: str, node: BedProcess) -> bool:
    """True when a line of `output` names `node` as lost: its role, its rank and
    its host (address or name), e.g. "lost worker 2 (node 5, 10.77.9.5:4123)"
    or "lost the scheduler (h1:9200): ..."."""
    if node.role == "scheduler":
        start = "lost the scheduler ("
    else:
        start = f"lost {node.role} {node.rank()} (node "
    return any(start in line and (f"{node.host.ip}:" in line or f"{node.host.name}:" in line)
               for line in output.splitlines())


def check_failure_reported(job: BedJob, event_at: float, lost: list[BedProcess],
                           named: BedProcess, label: str,
                           wait_for: list[BedProcess] | None = None) -> dict[str, float]:
    """Every process but those in `lost` exited with 200 (a lost peer) within
    the heartbeat timeout plus DETECTION_SLACK of `event_at`, naming `named`
    (role, rank, host); returns each survivor's detection time. Waits for
    every process, or for those in `wait_for`."""
    assert job.wait_all(timeout=HB_TIMEOUT + DETECTION_SLACK + 10, only=wait_for), \
        f"{label}: processes still running\n{job.describe()}"
    times = {}
    for p in job.procs:
        if p in lost:
            continue
        took = p.exited_at - event_at
        times[p.name()] = took
        assert p.returncode == 200, \
            f"{label}: {p.name()} exited {p.returncode}, not 200 (a lost peer)\n{job.describe()}"
        assert took <= HB_TIMEOUT + DETECTION_SLACK, \
            f"{label}: {p.name()} took {took:.2f} s to exit\n{job.describe()}"
        assert names_node(p.output, named), \
            f"{label}: {p.name()} did not name {named.name()} with its host\n{job.describe()}"
    print(f"\n{label}: detection (event to exit) per survivor:")
    for name, took in sorted(times.items(), key=lambda kv: kv[1]):
        print(f"  {took:6.2f} s  {name}")
    print(f"  min {min(times.values()):.2f} s, max {max(times.values()):.2f} s, "
          f"median {statistics.median(times.values()):.2f} s")
    return times


# -- packet loss ---------------------------------------------------------------------


@pytest.mark.parametrize("loss", [2, 5])
def test_sync_results_exact_under_packet_loss(netbed, tandem_bin_dir, loss):
    assert (WORKERS, SERVERS) == (4, 2)
    # Offloads off: the bridge sees (and drops) MTU-sized frames, not 64 KiB
    # segmentation-offload super-frames.
    bed = netbed(6, loss_percent=loss, offloads_off=True)
    env = {"PS_RESEND": "1", **HEARTBEATS, "PS_HEARTBEAT_TIMEOUT": "20"}
    job = BedJob(bed, PLACEMENT, [tandem_bin_dir / "kvstore_check", "--scenario", "sync"],
                 env=env)
    started = time.monotonic()
    finished = job.wait_all(timeout=240)
    took = time.monotonic() - started
    dropped = bed.dropped_packets()
    description = job.describe(last=400)
    try:
        assert finished, f"the job did not finish in 240 s\n{description}"
        assert all(p.returncode == 0 for p in job.procs), description
        # The launcher's "[worker R] " prefix, so that the closed-form checks of
        # test_kvstore_launch.py read these lines as they read a launched job's.
        output = []
        for p in job.role("worker"):
            m = re.search(r"kvstore_check: done scenario=sync rank=(\d+)", p.output)
            assert m, description
            output += [f"[worker {m.group(1)}] {line}" for line in p.output.splitlines()]
        text = "\n".join(output)
        seen = {r: {} for r in range(WORKERS)}
        for rank, label, value in LINE.findall(text):
            seen[int(rank)][label] = value
        check_sync_scenario(text, seen)
        assert dropped > 0, "the loss rule dropped nothing"
        # Every process ran its messages through the reliable layer.
        summaries = [re.findall(r"reliable delivery: \d+ messages sent, (\d+) resent", p.output)
                     for p in job.procs]
        assert all(summaries), description
        resent = sum(int(n) for found in summaries for n in found)
        print(f"\n{loss}% loss: exact in {took:.1f} s, {dropped} frames dropped on the bridge, "
              f"{resent} messages resent by PS_RESEND")
    finally:
        finish(bed, job)


# -- kill -9 ---------------------------------------------------------------------------


@pytest.mark.parametrize("role,seed,resend", [("worker", 501, False), ("server", 502, False),
                                              ("scheduler", 503, False), ("server", 505, True)])
def test_kill_is_reported_by_every_survivor(netbed, tandem_bin_dir, role, seed, resend):
    seed = fault_seed(seed)
    rng = random.Random(seed)
    bed = netbed(6)
    job = BedJob(bed, PLACEMENT, endless_rounds(tandem_bin_dir), env=job_env(resend))
    try:
        after_round = rng.choice([5, 10, 20, 40])
        job.wait_for(rf"kv_rounds: rank=\d+ round={after_round} ok", count=WORKERS, timeout=90,
                     role="worker")
        delay = rng.uniform(0.0, 1.0)
        time.sleep(delay)
        if role == "scheduler":
            victim, rank = job.role("scheduler")[0], None
        else:
            rank = rng.randrange(SERVERS if role == "server" else WORKERS)
            victim = job.by_rank(role, rank)
        print(f"\nseed {seed}: kill -9 {victim.name()} {delay:.3f} s after round {after_round}")
        killed_at = job.kill(victim)
        times = check_failure_reported(job, killed_at, [victim], victim,
                                       f"kill -9 {role}{RESEND_LABEL[resend]}")
        assert len(times) == len(PLACEMENT) - 1
    finally:
        finish(bed, job)


def test_frozen_worker_is_found_by_heartbeats(netbed, tandem_bin_dir):
    """SIGSTOP: the process lives and its sockets stay open, so only the
    heartbeat timeout can tell; once thawed it finds the job gone and exits."""
    seed = fault_seed(504)
    rng = random.Random(seed)
    bed = netbed(6)
    job = BedJob(bed, PLACEMENT, endless_rounds(tandem_bin_dir), env=job_env())
    try:
        job.wait_for(r"kv_rounds: rank=\d+ round=20 ok", count=WORKERS, timeout=90,
                     role="worker")
        time.sleep(rng.uniform(0.0, 1.0))
        rank = rng.randrange(WORKERS)
        victim = job.by_rank("worker", rank)
        print(f"\nseed {seed}: SIGSTOP {victim.name()}")
        stopped_at = job.kill(victim, signal.SIGSTOP)
        check_failure_reported(job, stopped_at, [victim], victim, "SIGSTOP worker",
                               wait_for=[p for p in job.procs if p is not victim])
        assert victim.exited_at is None, job.describe()
        thawed_at = job.kill(victim, signal.SIGCONT)
        assert job.wait_all(timeout=HB_TIMEOUT + DETECTION_SLACK), job.describe()
        assert victim.returncode == 200 and "lost the scheduler" in victim.output, job.describe()
        print(f"  {victim.exited_at - thawed_at:6.2f} s  {victim.name()} after SIGCONT")
    finally:
        finish(bed, job)


# -- link cuts ---------------------------------------------------------------------------


# The host cut off: a worker's (h5), a server's (h2), the scheduler's (h1,
# which also runs worker 0's process); and with PS_RESEND=1 too.
CUT_CASES = [("worker", 5, False), ("server", 2, False), ("scheduler", 1, False),
             ("worker", 5, True), ("scheduler", 1, True)]
# A short cut lasts a third of the heartbeat timeout: TCP's retransmission
# backoff (200 ms, doubling) can stretch a cut of c seconds into a silence
# of up to about 2c before the first retransmission after it gets through.
SHORT_CUT_TIMEOUT = 6.0
SHORT_CUT = SHORT_CUT_TIMEOUT / 3


@pytest.mark.parametrize("whose,host,resend", CUT_CASES)
def test_link_cut_shorter_than_heartbeat_timeout_is_survived(netbed, tandem_bin_dir, whose, host,
                                                            resend):
    rounds = 120
    bed = netbed(6)
    job = BedJob(bed, PLACEMENT,
                 [tandem_bin_dir / "kv_rounds", "--rounds", str(rounds), "--small", "1000",
                  "--big", "200000", "--pause-ms", "20", "--report-every", "5"],
                 env=job_env(resend, PS_HEARTBEAT_TIMEOUT=str(SHORT_CUT_TIMEOUT)))
    try:
        job.wait_for(r"kv_rounds: rank=\d+ round=20 ok", count=WORKERS, timeout=90,
                     role="worker")
        cut_host = bed.host(host)
        assert any(p.role == whose for p in job.procs if p.host == cut_host)
        bed.cut(cut_host)
        cut_at = time.monotonic()
        time.sleep(SHORT_CUT)
        bed.restore(cut_host)
        print(f"\n{cut_host.name} ({whose}'s host) cut off for {SHORT_CUT:.1f} s "
              f"(PS_HEARTBEAT_TIMEOUT={SHORT_CUT_TIMEOUT:g}){RESEND_LABEL[resend]}")
        assert job.wait_all(timeout=120), job.describe()
        assert all(p.returncode == 0 for p in job.procs), job.describe()
        for p in job.role("worker"):
            assert f"kv_rounds: done rank={p.rank()} rounds={rounds} workers={WORKERS} " \
                   f"servers={SERVERS}" in p.output, job.describe()
            # The rounds went on after the cut (all workers move in lockstep).
            assert any(t > cut_at + SHORT_CUT and re.search(ROUND_OK, text)
                       for t, text in p.lines), job.describe()
        print(f"every process finished {rounds} exact rounds")
    finally:
        finish(bed, job)


LOST_ANY = re.compile(r"lost (?:server|worker) \d+ \(node \d+, ([0-9.]+):")


@pytest.mark.parametrize("whose,host,resend", CUT_CASES)
def test_link_cut_longer_than_heartbeat_timeout_fails_the_job(netbed, tandem_bin_dir, whose,
                                                             host, resend):
    """With PS_RESEND=1 this found a bug: the cut-off process noticed the lost
    scheduler in time but then lingered for the unacknowledged messages'
    whole retry budget (11 s) before it exited; now it does not
    (ReliableTransport::AbandonUnacknowledged, docs/protocol-resend.md)."""
    bed = netbed(6)
    job = BedJob(bed, PLACEMENT, endless_rounds(tandem_bin_dir), env=job_env(resend))
    try:
        job.wait_for(r"kv_rounds: rank=\d+ round=20 ok", count=WORKERS, timeout=90,
                     role="worker")
        cut_host = bed.host(host)
        cut_off = [p for p in job.procs if p.host == cut_host]
        named = next(p for p in cut_off if p.role == whose)
        bed.cut(cut_host)
        cut_at = time.monotonic()
        print(f"\n{cut_host.name} ({', '.join(p.name() for p in cut_off)}) cut off until the "
              "job fails")
        try:
            label = f"link cut of the {whose}'s host > heartbeat timeout{RESEND_LABEL[resend]}"
            check_failure_reported(job, cut_at, cut_off, named, label)
            # The cut-off side fails too: it hears nothing from the other side
            # within the heartbeat timeout (without the scheduler: nothing from
            # the scheduler; with it: nothing from the nodes across the cut).
            others = {h.ip for h in bed.hosts if h != cut_host}
            for p in cut_off:
                took = p.exited_at - cut_at
                assert p.returncode == 200, job.describe()
                assert took <= HB_TIMEOUT + DETECTION_SLACK, job.describe()
                if whose == "scheduler":
                    named_ips = {m.group(1) for m in LOST_ANY.finditer(p.output)}
                    assert named_ips & others, \
                        f"{p.name()} named no node across the cut\n{job.describe()}"
                else:
                    assert "lost the scheduler" in p.output, job.describe()
                print(f"  {took:6.2f} s  {p.name()} (cut off)")
        finally:
            bed.restore(cut_host)
    finally:
        finish(bed, job)


def test_server_cut_in_the_middle_of_its_replies_fails_every_worker(netbed, tandem_bin_dir):
    """The server's host is cut while its big replies are half received (links
    shaped to 20 Mbit/s, 1 MiB a reply, so a reply takes about 0.4 s to
    arrive and the link is never idle). Found a hang: a pull whose reply had
    begun to arrive was left out when the job failed (its destination buffer
    was being written), and with the link cut the rest never came, so that
    worker waited for it until the operation timeout. Now the worker closes
    such a connection and fails the pull when the transport has let go of the
    buffer (KvClient::FailAll, docs/protocol-ps.md)."""
    bed = netbed(6, rate="20mbit")
    job = BedJob(bed, PLACEMENT,
                 [str(tandem_bin_dir / "kv_rounds"), "--rounds", "1000000", "--small", "1000",
                  "--big", "524288", "--pause-ms", "0", "--report-every", "1"],
                 env=job_env())
    try:
        job.wait_for(r"kv_rounds: rank=\d+ round=2 ok", count=WORKERS, timeout=90,
                     role="worker")
        cut_host = bed.host(2)
        cut_off = [p for p in job.procs if p.host == cut_host]
        bed.cut(cut_host)
        cut_at = time.monotonic()
        try:
            check_failure_reported(job, cut_at, cut_off, cut_off[0],
                                   "link cut of the server's host mid-reply")
        finally:
            bed.restore(cut_host)
    finally:
        finish(bed, job)


# -- soak ----------------------------------------------------------------------------------


SOAK_WORKERS = 8
# Six hosts: scheduler on h1, servers on h2 and h3, eight workers spread over
# all six.
SOAK_PLACEMENT = [(1, "scheduler"), (2, "server"), (3, "server")] + \
    [((i % 6) + 1, "worker") for i in range(SOAK_WORKERS)]
# The criterion: after a warm-up (the first quarter of the run, at least 10 s)
# no process's resident memory grows by more than this. A leak of 4 KiB a
# round exceeds it after 2 048 rounds, within the 45 s after warm-up of the
# default 60 s run (about 2 100 rounds).
SOAK_GROWTH_LIMIT_MIB = 8.0


def sanitized(binary) -> bool:
    """True for a build with AddressSanitizer (scripts/test.sh's asan stage),
    whose quarantine keeps freed memory on purpose: resident memory then
    grows by design, and the soak checks only exactness there."""
    with open(binary, "rb") as f:
        return b"AddressSanitizer" in f.read()


def test_soak_memory_is_stable(netbed, tandem_bin_dir):
    asan = sanitized(tandem_bin_dir / "kv_rounds")
    seconds = int(os.environ.get("TANDEM_SOAK_SECONDS", "30" if asan else "60"))
    warmup = max(10.0, seconds / 4)
    bed = netbed(6)
    job = BedJob(bed, SOAK_PLACEMENT,
                 [tandem_bin_dir / "kv_rounds", "--seconds", str(seconds), "--small", "1000",
                  "--big", "200000", "--report-every", "50", "--vote-every", "10"],
                 env=job_env())
    samples: dict[int, list[tuple[float, int]]] = {i: [] for i in range(len(job.procs))}
    try:
        job.wait_for(r"joined: ", count=len(job.procs), timeout=60)
        t0 = time.monotonic()
        while job.alive() and time.monotonic() - t0 < seconds + 60:
            now = time.monotonic() - t0
            for i, p in enumerate(job.procs):
                rss = p.rss_kib()
                if rss is not None and p.exited_at is None:
                    samples[i].append((now, rss))
            time.sleep(1.0)
        assert job.wait_all(timeout=30), job.describe()
        assert all(p.returncode == 0 for p in job.procs), job.describe()
        rounds = {int(m.group(1)) for p in job.role("worker")
                  for m in [re.search(r"kv_rounds: done rank=\d+ rounds=(\d+)", p.output)] if m}
        assert len(rounds) == 1, job.describe()
        print(f"\nsoak: {seconds} s, {SOAK_WORKERS} workers, {len(job.role('server'))} servers, "
              f"{rounds.pop()} exact rounds; resident memory (MiB) per process:")
        print(f"  {'process':34} {'start':>8} {'at warm-up':>10} {'end':>8} {'max':>8} "
              f"{'growth':>8}")
        failures = []
        for i, p in enumerate(job.procs):
            after = [rss for t, rss in samples[i] if t >= warmup]
            assert len(after) >= 5, f"too few samples of {p.name()}: {samples[i]}"
            base = statistics.median(after[:3]) / 1024
            end = statistics.median(after[-3:]) / 1024
            peak = max(after) / 1024
            growth = max(end, peak) - base
            first = samples[i][0][1] / 1024
            print(f"  {p.name():34} {first:8.1f} {base:10.1f} {end:8.1f} {peak:8.1f} "
                  f"{growth:8.2f}")
            if growth > SOAK_GROWTH_LIMIT_MIB and not asan:
                failures.append(f"{p.name()} grew {growth:.1f} MiB after warm-up")
        if asan:
            print("  (AddressSanitizer build: its quarantine holds freed memory, so the growth "
                  "criterion is not applied)")
        assert not failures, "; ".join(failures)
    finally:
        finish(bed, job)
