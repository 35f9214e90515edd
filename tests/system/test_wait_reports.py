"""No silent waits (docs/reliability.md, "No silent waits"): a process that
waits for another logs, every TANDEM_WAIT_REPORT_SECONDS (30 s by default),
what it waits for and since when. Here the interval is 1 s and worker 1 of a
real job sleeps 2.5 s before each step, so worker 0 (and the scheduler) must
say, at each step, whom they wait for; the jobs still end with exact results.
A process whose scheduler never answers says it is still connecting, with
the last error, before it gives up.

Skipped with a reason when the Python package was not built."""

from __future__ import annotations

import os
import re
import subprocess
import time

import pytest

from conftest import free_port
from python_job import PYTHON, check_ok, python_env, worker

DELAY = 2.5
INTERVAL = "1"
SINCE = r"after \d+ s \(since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)"

# (api, servers, [(label, pattern)]): the lines each job must print.
CASES = [
    ("kvstore", 1, [
        ("worker 0", rf"still waiting for the node table from the scheduler at \S+ {SINCE}"),
        ("scheduler", rf"scheduler: still waiting for every node to register {SINCE}: "
                      rf"still missing .*worker"),
        ("worker 0", rf"still waiting for (push|pull) of key \S+ {SINCE} \(gives up after 600 s, "
                     rf"TANDEM_KV_TIMEOUT\): waiting for server 0"),
        ("worker 0", rf"still in barrier #\d+ over \S+ {SINCE}"),
    ]),
    ("collectives", 0, [
        ("worker 0", rf"still waiting for the node table from the scheduler at \S+ {SINCE}"),
        ("worker 0", rf"collective operation \d+ of communicator \d+: still waiting for "
                     rf"worker rank 1\b.* {SINCE}"),
    ]),
]


@pytest.mark.parametrize("api,servers,expected", CASES, ids=[c[0] for c in CASES])
def test_a_waiting_process_says_whom_it_waits_for(launch, tandem_bin_dir, api, servers,
                                                   expected):
    result = launch(2, servers, worker("slow_peer_worker.py") + ["--api", api, "--delay", str(DELAY)],
                    env={"TANDEM_WAIT_REPORT_SECONDS": INTERVAL},
                    launcher_env=python_env(tandem_bin_dir), timeout=120)
    assert result.returncode == 0, result.job.describe()
    assert check_ok(result.output, "slow_peer", 2, api) == 1
    for label, pattern in expected:
        lines = [line for line in result.output.splitlines()
                 if line.startswith(f"[{label}] ") and re.search(pattern, line)]
        assert lines, f"{label} never printed /{pattern}/:\n{result.job.describe()}"
    # Worker 1 waits for nobody: it is the slow one.
    assert not [line for line in result.output.splitlines()
                if line.startswith("[worker 1] ") and "still waiting" in line], result.output


def test_a_connect_that_keeps_failing_says_so_before_it_gives_up(tandem_bin_dir, tmp_path):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("DMLC_", "TANDEM_"))},
           **python_env(tandem_bin_dir)}
    port = free_port()  # nobody listens there
    env.update({"DMLC_ROLE": "worker", "DMLC_PS_ROOT_URI": "127.0.0.1",
                "DMLC_PS_ROOT_PORT": str(port), "DMLC_NUM_WORKER": "1", "DMLC_NUM_SERVER": "1",
                "TANDEM_INSECURE": "1", "TANDEM_CONNECT_TIMEOUT": "3.5",
                "TANDEM_WAIT_REPORT_SECONDS": INTERVAL})
    started = time.monotonic()
    proc = subprocess.run([PYTHON, "-c", "import tandem; tandem.kvstore.create('dist_sync')"],
                          env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    seconds = time.monotonic() - started
    reports = re.findall(rf"still connecting to 127\.0\.0\.1:{port} {SINCE} \((\d+) attempts; "
                         rf"last error: connect to \S+: Connection refused; gives up after 3 s, "
                         rf"TANDEM_CONNECT_TIMEOUT\)", proc.stderr)
    assert len(reports) >= 2, proc.stderr
    assert proc.returncode == 201, proc.stderr  # tandem.Timeout, retryable
    assert re.search(rf"connecting to 127\.0\.0\.1:{port} timed out after 3500 ms", proc.stderr), \
        proc.stderr
    assert seconds < 30, seconds
