"""The foundation through `tandem launch` on loopback: a job forms, ranks are
dense, barriers pass, a killed worker is named everywhere and nothing is left,
and intruders (wrong secret, garbage, silence) are turned away while the job
completes."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time

import pytest

from conftest import free_port

DONE = re.compile(r"\[(scheduler|server \d+|worker \d+)\] cluster_check: done role=(\w+) "
                  r"rank=(\d+) workers=(\d+) servers=(\d+) barriers=(\d+) table=(\w+)")


def done_lines(output: str):
    return [m.groups() for m in DONE.finditer(output)]


def check_ranks(output: str, servers: int, workers: int, barriers_per_role=None):
    found = done_lines(output)
    by_role: dict[str, list[int]] = {}
    tables = set()
    for label, role, rank, nw, ns, barriers, table in found:
        by_role.setdefault(role, []).append(int(rank))
        tables.add(table)
        assert (int(nw), int(ns)) == (workers, servers), label
        # tandem launch asks for rank i for its i-th process; the label says i.
        if role != "scheduler":
            assert label == f"{role} {rank}", (label, role, rank)
        if barriers_per_role is not None:
            assert int(barriers) == barriers_per_role[role], (label, barriers)
    assert sorted(by_role.get("worker", [])) == list(range(workers)), found
    assert sorted(by_role.get("server", [])) == list(range(servers)), found
    assert len(tables) == 1, f"processes disagree on the node table: {tables}"


def barriers_for(role: str, total: int) -> int:
    # cluster_check cycles through six masks; count those that include the role.
    member = {"scheduler": [1, 0, 0, 1, 0, 1], "server": [1, 0, 1, 0, 1, 1],
              "worker": [1, 1, 1, 1, 0, 0]}[role]
    return sum(member[i % 6] for i in range(total))


@pytest.mark.parametrize("run", range(3))
def test_seven_nodes_form_and_pass_100_barriers(launch, tandem_bin_dir, run):
    result = launch(4, 2, [tandem_bin_dir / "cluster_check", "--barriers", "100"],
                    extra_args=["--command-runs-all-roles"], timeout=120)
    assert result.returncode == 0, result.job.describe()
    counts = {r: barriers_for(r, 100) for r in ("scheduler", "server", "worker")}
    check_ranks(result.output, servers=2, workers=4, barriers_per_role=counts)
    assert len(done_lines(result.output)) == 7


def test_built_in_scheduler_and_servers(launch, tandem_bin_dir):
    result = launch(3, 2, [tandem_bin_dir / "cluster_check", "--serve-roles", "--barriers", "20"],
                    timeout=120)
    assert result.returncode == 0, result.job.describe()
    found = done_lines(result.output)
    assert sorted(int(g[2]) for g in found) == [0, 1, 2], found
    assert all(g[1] == "worker" and g[5] == "20" for g in found), found
    assert "every node left; the job is complete" in result.output


def test_program_hands_scheduler_and_server_roles_to_tandem(launch, tandem_bin_dir):
    result = launch(2, 1, [tandem_bin_dir / "cluster_check", "--serve-roles", "--barriers", "10"],
                    extra_args=["--command-runs-all-roles"], timeout=120)
    assert result.returncode == 0, result.job.describe()
    found = done_lines(result.output)
    # Only the workers print a summary: the other roles were served by tandem.
    assert sorted((g[1], int(g[2])) for g in found) == [("worker", 0), ("worker", 1)], found
    assert re.search(r"\[scheduler\] cluster_check: pid=\d+ role=scheduler", result.output)


def test_kill_9_of_a_worker_fails_every_process_naming_it(launch, tandem_bin_dir):
    heartbeat_timeout = 4
    job = launch.start(4, 2, [tandem_bin_dir / "cluster_check", "--barriers", "1000000",
                              "--sleep-ms", "5"],
                       extra_args=["--command-runs-all-roles"],
                       env={"PS_HEARTBEAT_INTERVAL": "0.5",
                            "PS_HEARTBEAT_TIMEOUT": str(heartbeat_timeout)})
    pids = {}
    for label in ["scheduler", "server 0", "server 1"] + [f"worker {i}" for i in range(4)]:
        m = job.wait_for_line(rf"\[{label}\] cluster_check: pid=(\d+)", timeout=60)
        pids[label] = int(m.group(1))
    # Let the barriers run a little, then kill worker 2 without warning.
    job.wait_for_line(r"barrier|pid=", timeout=5)
    time.sleep(1.0)
    os.kill(pids["worker 2"], signal.SIGKILL)
    killed_at = time.monotonic()
    code = job.wait(timeout=heartbeat_timeout + 30)
    elapsed = time.monotonic() - killed_at
    assert code != 0, job.describe()
    assert elapsed < heartbeat_timeout + 15, f"took {elapsed:.1f} s\n{job.describe()}"
    out = job.output
    for label, pid in pids.items():
        if label == "worker 2":
            continue
        # Every other process reports the loss of worker 2 and fails.
        pattern = rf"\[{label}\] cluster_check \(pid {pid}\): error: .*lost worker 2 \(node \d+"
        assert re.search(pattern, out), f"{label} did not name worker 2\n{job.describe()}"
    job.assert_no_leftovers()
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def _intruder_garbage(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(os.urandom(4096))
        s.settimeout(5)
        try:
            while s.recv(4096):
                pass  # the scheduler must close on us
        except (ConnectionResetError, socket.timeout):
            pass


def test_intruders_are_rejected_and_the_job_completes(launch, tandem_bin_dir):
    port = free_port()
    job = launch.start(2, 1, [tandem_bin_dir / "cluster_check", "--barriers", "300",
                              "--sleep-ms", "10"],
                       extra_args=["--command-runs-all-roles"],
                       env={"DMLC_PS_ROOT_PORT": str(port), "TANDEM_HANDSHAKE_TIMEOUT": "2"})
    job.wait_for_line(r"scheduler listening on", timeout=60)

    # 1. A tandem node with the wrong secret.
    env = dict(os.environ, DMLC_ROLE="worker", DMLC_PS_ROOT_URI="127.0.0.1",
               DMLC_PS_ROOT_PORT=str(port), DMLC_NUM_SERVER="1", DMLC_NUM_WORKER="2",
               TANDEM_SECRET="not-the-secret", TANDEM_CONNECT_TIMEOUT="5")
    wrong = subprocess.run([str(tandem_bin_dir / "cluster_check"), "--barriers", "1"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert wrong.returncode != 0
    assert "TANDEM_SECRET" in wrong.stderr, wrong.stderr

    # 2. Random bytes.
    _intruder_garbage(port)

    # 3. A client that connects and says nothing: dropped after the handshake timeout.
    silent = socket.create_connection(("127.0.0.1", port), timeout=5)
    silent.settimeout(10)
    started = time.monotonic()
    try:
        data = silent.recv(4096)
    except ConnectionResetError:
        data = b""
    assert data == b"", "the scheduler should close a silent connection"
    assert time.monotonic() - started < 9
    silent.close()

    code = job.wait(timeout=120)
    assert code == 0, job.describe()
    check_ranks(job.output, servers=1, workers=2)
    # Each rejection was logged with the intruder's address.
    warnings = [line for line in job.output.splitlines() if "127.0.0.1:" in line and
                re.search(r"(?i)drop|reject|fail", line) and "[scheduler]" in line]
    assert len(warnings) >= 3, job.describe()


def test_ctrl_c_tears_the_whole_job_down(launch, tandem_bin_dir):
    # A job that would run for a long time; Ctrl-C (SIGINT to the launcher)
    # must stop every process within the teardown grace and report it.
    job = launch.start(3, 1, [tandem_bin_dir / "cluster_check", "--barriers", "1000000",
                              "--sleep-ms", "5"],
                       extra_args=["--command-runs-all-roles", "--teardown-grace", "2"])
    for label in ["scheduler", "server 0"] + [f"worker {i}" for i in range(3)]:
        job.wait_for_line(rf"\[{label}\] cluster_check: pid=(\d+)", timeout=60)
    assert len(job.processes()) >= 6, job.describe()
    interrupted_at = time.monotonic()
    job.interrupt()
    code = job.wait(timeout=30)
    elapsed = time.monotonic() - interrupted_at
    # The shell convention for death by SIGINT: 128 + 2.
    assert code == 130, f"exit code {code}\n{job.describe()}"
    assert elapsed < 10, f"took {elapsed:.1f} s\n{job.describe()}"
    job.assert_no_leftovers()


def test_workers_that_never_join_end_the_job_after_the_grace_period(launch):
    """Workers that exit 0 without joining leave the scheduler and the server
    waiting for them; the launcher ends the job after --teardown-grace with
    201 and names them, instead of waiting for TANDEM_START_TIMEOUT."""
    started = time.monotonic()
    result = launch(2, 1, ["/bin/true"], extra_args=["--teardown-grace", "1"], timeout=60)
    elapsed = time.monotonic() - started
    assert result.returncode == 201, result.job.describe()
    assert elapsed < 20, f"took {elapsed:.1f} s\n{result.job.describe()}"
    assert "but scheduler, server 0 are still running after 1 s" in result.output, result.output
