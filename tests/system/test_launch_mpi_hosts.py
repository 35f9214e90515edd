"""`tandem launch --launcher mpi` across three hosts in network namespaces
(ssh_bed.py: Debian's sshd on each, keys the test generates): Open MPI's
mpirun runs on h1, reaches h2 and h3 through its rsh agent (ssh with the
bed's key), keeps its daemons' traffic on the bridge (oob_tcp_if_include
eth0), and starts `tandem rank-exec` as every rank; the hosts share this
file system, so tandem and the test programs are at the same paths
everywhere. Checked: a parameter-server job and a collectives-only job
spread over the three hosts give exact results; kill -9 of a worker on
another host fails the job with its code, the launcher's last line names
that worker and its host, and nothing is left on any host."""

from __future__ import annotations

import os
import re
import shutil
import signal
import time

import pytest

from ssh_bed import (  # noqa: F401 - sshbed is a fixture
    assert_nothing_left, sshbed, start_launch, wait_for, wait_launch)
from test_kvstore_launch import LINE, SERVERS, WORKERS, check_sync_scenario

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None,
                                reason="Open MPI's mpirun is not installed (openmpi-bin)")

PID = re.compile(r"\[(scheduler|server \d+|worker \d+)\] cluster_check: pid=(\d+)")
FORMED = re.compile(r"scheduler: all \d+ nodes registered")
HOST_OF = re.compile(r"\[rank-exec\] (scheduler|server \d+|worker \d+) on (h\d) \(pid \d+\)")


def finish(proc, lines, timeout: float) -> tuple[int, str]:
    code = wait_launch(proc, timeout)
    time.sleep(0.2)  # the reader thread takes the last lines
    return code, "".join(lines)


def test_parameter_server_job_across_three_hosts(sshbed, tandem_bin_dir):
    # 1 scheduler + 2 servers + 4 workers = 7 ranks on 3 + 2 + 2 slots.
    proc, lines = start_launch(sshbed, tandem_bin_dir, "h1:3\nh2:2\nh3:2\n",
                               ["-n", str(WORKERS), "-s", str(SERVERS)],
                               [str(tandem_bin_dir / "kvstore_check"), "--scenario", "sync"],
                               launcher="mpi")
    code, out = finish(proc, lines, 120)
    assert code == 0, out
    seen: dict[int, dict[str, str]] = {r: {} for r in range(WORKERS)}
    for rank, label, value in LINE.findall(out):
        seen[int(rank)][label] = value
    check_sync_scenario(out, seen)
    assert f"{SERVERS} servers, {WORKERS} workers on 3 hosts" in out, out
    # mpirun fills h1's slots first: the scheduler, both servers; then the workers.
    hosts = dict(HOST_OF.findall(out))
    assert hosts == {"scheduler": "h1", "server 0": "h1", "server 1": "h1", "worker 0": "h2",
                     "worker 1": "h2", "worker 2": "h3", "worker 3": "h3"}, out
    assert_nothing_left(sshbed, within=10)


def test_collectives_job_across_three_hosts(sshbed, tandem_bin_dir):
    proc, lines = start_launch(sshbed, tandem_bin_dir, "h1\nh2\nh3\n",
                               ["-n", "3", "--no-scheduler"],
                               [str(tandem_bin_dir / "collective_check")], launcher="mpi")
    code, out = finish(proc, lines, 120)
    assert code == 0, out
    for rank in range(3):
        assert re.search(rf"\[worker {rank}\] collective_check: ok rank={rank} size=3 checks=\d+",
                         out), out
    assert dict(HOST_OF.findall(out)) == {"worker 0": "h1", "worker 1": "h2", "worker 2": "h3"}
    assert_nothing_left(sshbed, within=10)


def test_kill_9_of_a_remote_worker_ends_everything_on_every_host(sshbed, tandem_bin_dir):
    proc, lines = start_launch(sshbed, tandem_bin_dir, "h1:2\nh2:2\nh3:2\n",
                               ["-n", "4", "-s", "1", "--command-runs-all-roles",
                                "--teardown-grace", "3"],
                               [str(tandem_bin_dir / "cluster_check"), "--barriers", "100000000",
                                "--sleep-ms", "5"], launcher="mpi")
    pids = {m.group(1): int(m.group(2)) for m in wait_for(lines, PID, 6, 90)}
    wait_for(lines, FORMED, 1, 60)
    time.sleep(0.5)
    # Ranks 0..5 on two slots each: worker 3 (rank 5) runs on h3.
    killed = time.monotonic()
    os.kill(pids["worker 3"], signal.SIGKILL)
    code, out = finish(proc, lines, 60)
    assert code == 137, out
    assert time.monotonic() - killed < 20, out
    last = [line for line in out.splitlines() if line.startswith("[launcher] ")][-1]
    assert last == f"[launcher] job failed: worker 3 on h3 (pid {pids['worker 3']}) killed by " \
                   "signal 9 (SIGKILL)", out
    assert_nothing_left(sshbed, within=10)
