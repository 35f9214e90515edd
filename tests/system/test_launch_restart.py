"""Whole-job restarts: `tandem launch --max-restarts N` tears the whole job
down when a process fails and starts it again with a fresh identity and
TANDEM_RESTART_COUNT, up to N times; set-up errors and interrupts are never
restarted. The job's processes run tests/programs/restart_check, which fails
in worker 1 on the early attempts. docs/launch.md, "Restarts". (The ssh
launcher's restart is tested in test_launch_ssh.py, on its bed.)"""

from __future__ import annotations

import os
import re
import shutil
import signal
import time

import pytest

# Fast loss detection, so that the survivors of a failed attempt end on their
# own within the launcher's grace period.
FAST = {"PS_HEARTBEAT_INTERVAL": "0.5", "PS_HEARTBEAT_TIMEOUT": "4"}

START = re.compile(r"\[(scheduler|server \d+|worker \d+)\] restart_check: pid=(\d+) role=(\w+) "
                   r"restart=(\w+) max=(\w+) port=(\d+) secret=(\w+)")
ANNOUNCED = re.compile(r"\[launcher\] job (\S+): scheduler at 127\.0\.0\.1:(\d+)")


def starts(output: str, restart: int) -> dict[str, dict]:
    """The processes that started with TANDEM_RESTART_COUNT=restart, by label."""
    found = {}
    for label, pid, role, count, limit, port, secret in START.findall(output):
        if count == str(restart):
            assert label not in found, f"{label} started twice in attempt {restart}\n{output}"
            found[label] = {"pid": int(pid), "role": role, "max": limit, "port": port,
                            "secret": secret}
    return found


def attempt_alive(pid: int, restart: int) -> bool:
    """Whether `pid` is still the process of attempt `restart` (not a reused pid)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3]
    return state not in (b"Z", b"X") and f"TANDEM_RESTART_COUNT={restart}".encode() in env


def start_job(launch, tandem_bin_dir, *program_args: str, max_restarts: int,
              delay: str = "0.2", extra: tuple[str, ...] = (), launcher: str = "local"):
    return launch.start(2, 1, [tandem_bin_dir / "restart_check", *program_args],
                        launcher=launcher, env=FAST,
                        extra_args=["--command-runs-all-roles", "--teardown-grace", "2",
                                    "--max-restarts", str(max_restarts),
                                    "--restart-delay", delay, *extra])


LABELS = {"scheduler", "server 0", "worker 0", "worker 1"}


def test_a_worker_killed_on_the_first_start_is_restarted_once_and_the_job_succeeds(
        launch, tandem_bin_dir):
    job = start_job(launch, tandem_bin_dir, "--fail-rank", "1", "--fail-until", "1",
                    max_restarts=3)
    m = job.wait_for_line(r"\[launcher\] restarting the job \(restart 1 of 3\) after worker 1 "
                          r"\(pid (\d+)\) killed by signal 9 \(SIGKILL\); starting it again in "
                          r"0\.2 s", timeout=40)
    # The restart is announced only once the whole first attempt is gone.
    first = starts(job.output, 0)
    assert set(first) == LABELS, job.describe()
    survivors = [label for label, p in first.items() if attempt_alive(p["pid"], 0)]
    assert not survivors, f"{survivors} of the first attempt still run\n{job.describe()}"
    assert int(m.group(1)) == first["worker 1"]["pid"], job.describe()

    code = job.wait(timeout=40)
    assert code == 0, job.describe()
    job.assert_no_leftovers()
    out = job.output
    assert out.count("[launcher] restarting the job") == 1, out
    assert "[launcher] job succeeded after 1 restart" in out, out
    second = starts(out, 1)
    assert set(second) == LABELS, out
    # Every process of both attempts was told the attempt and the limit.
    assert {p["max"] for p in (*first.values(), *second.values())} == {"3"}, out
    assert not starts(out, 2), out
    assert re.search(r"\[worker 1\] restart_check: worker 1 fails \(kill9\) on restart 0", out)
    for rank in (0, 1):
        assert f"[worker {rank}] restart_check: done rank={rank} restart=1" in out, out
        assert f"done rank={rank} restart=0" not in out, out
    # A fresh identity: a new scheduler port and secret, the same job id.
    announced = ANNOUNCED.findall(out)
    assert len(announced) == 2, out
    assert announced[0][0] == announced[1][0], announced
    assert announced[0][1] != announced[1][1], announced
    for attempt, (_, port) in zip((first, second), announced):
        assert {p["port"] for p in attempt.values()} == {port}, out
        assert len({p["secret"] for p in attempt.values()}) == 1, out
    assert first["worker 0"]["secret"] != second["worker 0"]["secret"], out


def test_exhausted_restarts_exit_with_the_last_failure_naming_every_attempt(
        launch, tandem_bin_dir):
    job = start_job(launch, tandem_bin_dir, "--fail-rank", "1", "--fail-until", "99",
                    max_restarts=2)
    code = job.wait(timeout=50)
    assert code == 128 + signal.SIGKILL, job.describe()
    job.assert_no_leftovers()
    out = job.output
    pids = [starts(out, k)["worker 1"]["pid"] for k in range(3)]
    assert not starts(out, 3), out
    assert out.count("[launcher] restarting the job") == 2, out
    expected = "; ".join(f"attempt {k + 1}: worker 1 (pid {pid}) killed by signal 9 (SIGKILL)"
                         for k, pid in enumerate(pids))
    last = [line for line in out.splitlines() if line.startswith("[launcher]")][-1]
    assert last == ("[launcher] job failed after 3 attempts, no restart left "
                    f"(--max-restarts 2): {expected}"), out


@pytest.mark.parametrize("fail_with, policy, code, restarted", [
    ("exit:78", "exit-code", 78, False),   # a configuration error: never
    ("exit:2", "on-failure", 2, False),    # a usage error: never
    ("exit:1", "exit-code", 1, False),     # 1..127 are permanent under exit-code
    ("exit:1", "on-failure", 0, True),     # ... and retried under on-failure
    ("exit:200", "exit-code", 0, True),    # PeerLost is retryable
])
def test_which_exit_codes_are_restarted(launch, tandem_bin_dir, fail_with, policy, code,
                                        restarted):
    job = start_job(launch, tandem_bin_dir, "--fail-rank", "1", "--fail-until", "1",
                    "--fail-with", fail_with, max_restarts=2,
                    extra=("--restart-policy", policy))
    assert job.wait(timeout=40) == code, job.describe()
    job.assert_no_leftovers()
    out = job.output
    status = fail_with.split(":")[1]
    pid = starts(out, 0)["worker 1"]["pid"]
    if restarted:
        # Every process's 200 looks alike (each lost a peer): any may be named.
        who = rf"worker 1 \(pid {pid}\)" if status != "200" else r"[a-z]+(?: \d+)? \(pid \d+\)"
        assert re.search(rf"\[launcher\] restarting the job \(restart 1 of 2\) after {who} "
                         rf"exited with status {status};", out), out
        assert set(starts(out, 1)) == LABELS, out
        assert "[launcher] job succeeded after 1 restart" in out, out
    else:
        assert "[launcher] restarting the job" not in out, out
        assert not starts(out, 1), out
        assert re.search(rf"\[launcher\] not restarting the job: worker 1 \(pid {pid}\) exited "
                         rf"with status {status}: ", out), out


def test_sigint_during_the_restart_delay_stops_at_once(launch, tandem_bin_dir):
    job = start_job(launch, tandem_bin_dir, "--fail-rank", "1", "--fail-until", "1",
                    max_restarts=3, delay="30")
    job.wait_for_line(r"\[launcher\] restarting the job \(restart 1 of 3\)", timeout=40)
    sent = time.monotonic()
    job.interrupt()
    code = job.wait(timeout=10)
    assert time.monotonic() - sent < 3, job.describe()
    assert code == 128 + signal.SIGKILL, job.describe()  # the failure that came first
    out = job.output
    assert re.search(r"\[launcher\] received SIGINT during the restart delay; not restarting "
                     r"the job \(attempt 1: worker 1 \(pid \d+\) killed by signal 9", out), out
    assert not starts(out, 1), out
    job.assert_no_leftovers()


def test_sigterm_while_the_job_runs_is_never_restarted(launch, tandem_bin_dir):
    job = start_job(launch, tandem_bin_dir, "--hold-ms", "60000", max_restarts=3)
    for rank in (0, 1):
        job.wait_for_line(rf"\[worker {rank}\] restart_check: pid=", timeout=30)
    time.sleep(0.5)  # let them join and pass the first barrier
    os.kill(job.proc.pid, signal.SIGTERM)
    code = job.wait(timeout=20)
    assert code == 128 + signal.SIGTERM, job.describe()
    out = job.output
    assert "[launcher] not restarting the job: the launcher received SIGTERM" in out, out
    assert "restarting the job (restart" not in out, out
    assert not starts(out, 1), out
    job.assert_no_leftovers()


@pytest.mark.parametrize("args, message", [
    (["--max-restarts", "-1"], "--max-restarts"),
    (["--max-restarts", "two"], "--max-restarts"),
    (["--restart-delay", "-1"], "--restart-delay"),
    (["--restart-policy", "always"], "--restart-policy"),
])
def test_bad_restart_options_are_refused_before_anything_starts(launch, tandem_bin_dir, args,
                                                                message):
    result = launch(1, 0, [tandem_bin_dir / "restart_check"], extra_args=args, timeout=20)
    assert result.returncode != 0, result.job.describe()
    assert message in result.stderr, result.stderr
    assert "restart_check: pid=" not in result.output, result.output


@pytest.mark.skipif(shutil.which("mpirun") is None,
                    reason="Open MPI's mpirun is not installed (openmpi-bin)")
def test_the_mpi_launcher_restarts_the_whole_job_too(launch, tandem_bin_dir):
    job = start_job(launch, tandem_bin_dir, "--fail-rank", "1", "--fail-until", "1",
                    max_restarts=1, launcher="mpi")
    code = job.wait(timeout=50)
    assert code == 0, job.describe()
    out = job.output
    # The cause is the rank that rank-exec reported, with its status, not mpirun's exit.
    assert re.search(r"\[launcher\] restarting the job \(restart 1 of 1\) after worker 1 on \S+ "
                     r"\(pid \d+\) killed by signal 9 \(SIGKILL\);", out), out
    assert "[launcher] job succeeded after 1 restart" in out, out
    first, second = starts(out, 0), starts(out, 1)
    assert set(first) == LABELS and set(second) == LABELS, out
    # Through mpirun's -x and rank-exec, every rank was told the attempt.
    assert {p["max"] for p in (*first.values(), *second.values())} == {"1"}, out
    job.assert_no_leftovers()

