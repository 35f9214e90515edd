"""Connections that never authenticate cost a server and the scheduler little
memory, and give it back (docs/protocol-handshake.md, "Resources"): with a
real job running (2 workers, 1 server, dist_sync rounds through
tandem.kvstore), 4000 idle TCP connections are opened to the server and 4000
to the scheduler. Each process's RSS may rise by at most 50 MiB (it used to
rise by ~1 GiB: a 256 KiB receive buffer per connection); the oldest beyond
TANDEM_MAX_UNAUTHENTICATED are dropped, the drops are logged in a few lines
rather than one per connection; after the connections close, RSS is within
10 MiB of where it started; and the job then completes with exact results.

Skipped with a reason when the Python package was not built or the file
descriptor limit cannot hold 8000 sockets."""

from __future__ import annotations

import re
import resource
import socket
import subprocess
import time
from pathlib import Path

import pytest

from python_job import python_env, worker

IDLE = 4000


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def listening_port(pid: int) -> int:
    """The loopback TCP port process `pid` listens on (ss from iproute2)."""
    out = subprocess.run(["ss", "-Hltnp"], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if f"pid={pid}," in line:
            m = re.search(r"127\.0\.0\.1:(\d+)\s", line)
            if m:
                return int(m.group(1))
    raise AssertionError(f"process {pid} listens on no loopback port:\n{out}")


@pytest.fixture
def enough_descriptors():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2 * IDLE + 500:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} cannot hold {2 * IDLE} sockets")
    # The job's processes inherit the raised limit from this one.
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_idle_unauthenticated_connections_cost_little_and_the_job_completes(
        launch, tandem_bin_dir, tmp_path, enough_descriptors):
    go = tmp_path / "go"
    job = launch.start(2, 1, worker("peer_loss_worker.py") + ["--rounds", "3", "--wait-for",
                                                              str(go)],
                       launcher_env=python_env(tandem_bin_dir))
    deadline = time.monotonic() + 60
    while len(re.findall(r"peer_loss: rank \d waiting for", job.output)) < 2:
        assert job.returncode is None, job.describe()
        assert time.monotonic() < deadline, "the workers never started\n" + job.describe()
        time.sleep(0.05)
    targets = {role: job.role_processes(role)[0].pid for role in ("server", "scheduler")}
    ports = {role: listening_port(pid) for role, pid in targets.items()}
    before = {role: rss_mib(pid) for role, pid in targets.items()}
    sockets = []
    try:
        for role in targets:
            for _ in range(IDLE):
                sockets.append(socket.create_connection(("127.0.0.1", ports[role])))
        time.sleep(2)  # every connection accepted
        during = {role: rss_mib(pid) for role, pid in targets.items()}
    finally:
        for s in sockets:
            s.close()
    time.sleep(3)
    after = {role: rss_mib(pid) for role, pid in targets.items()}
    print(f"RSS MiB before {before}, with {IDLE} idle connections each {during}, "
          f"after they closed {after}")
    for role in targets:
        assert during[role] - before[role] <= 50, (role, before, during)
        assert after[role] - before[role] <= 10, (role, before, after)
    # The drops beyond the first few of an interval are summed up at its end.
    summary = r"\d+ more connections dropped before they authenticated in the last 10 s"
    deadline = time.monotonic() + 20
    while len(re.findall(summary, job.output)) < 2:
        assert time.monotonic() < deadline, "no summary of the drops\n" + job.describe()
        time.sleep(0.1)
    go.touch()
    assert job.wait(timeout=60) == 0, job.describe()
    job.assert_no_leftovers()
    output = job.output
    for rank in (0, 1):
        assert f"[worker {rank}] peer_loss: round 3 rank {rank} value 7" in output, output
    # The flood is logged in a few lines, not one per connection.
    drops = [line for line in output.splitlines() if "dropped connection" in line
             or "more connections dropped before they authenticated" in line]
    assert drops, output
    assert len(drops) <= 40, f"{len(drops)} lines about dropped connections"
