"""`tandem launch --launcher ssh` across three hosts in network namespaces,
each running Debian's sshd with keys this test generates (ssh_bed.py). The launcher runs
on host h1 (the bed is not reachable from outside), the hostfile names the
hosts by name, and the job's processes run on their hosts under
`tandem remote-exec`. Checked: the job forms with dense ranks and completes;
kill -9 of a remote worker fails the job naming it and leaves nothing on any
host; kill -9 of the launcher itself stops every remote process within
seconds; a host that cannot be reached is diagnosed before anything starts;
every host's TANDEM_TIMELINE file is merged into one trace;
with --max-restarts a killed remote worker restarts the job on every host;
with --workers 3:4 a killed remote worker leaves the job, which succeeds;
in an elastic job without servers, --max-restarts replaces a killed remote
worker on its host, and the replacement joins the running job; with
--host-discovery-script a host's lost slot takes its worker out of the job
and a host that appears gets the replacement."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest

from ssh_bed import (  # noqa: F401 - sshbed is a fixture
    assert_nothing_left, sshbed, start_launch, wait_for, wait_launch)

DONE = re.compile(r"\[(scheduler|server \d+|worker \d+)\] cluster_check: done role=(\w+) "
                  r"rank=(\d+) workers=(\d+) servers=(\d+)")
PID = re.compile(r"\[(scheduler|server \d+|worker \d+)\] cluster_check: pid=(\d+)")
FORMED = re.compile(r"scheduler: all \d+ nodes registered")

HOSTFILE = "# the bed\nh1\nh2:2   # two slots\nh3 slots=2\n"


def test_a_job_across_three_hosts_completes(sshbed, tandem_bin_dir):
    proc, lines = start_launch(sshbed, tandem_bin_dir, HOSTFILE, ["-n", "4", "-s", "2"],
                               [str(tandem_bin_dir / "cluster_check"), "--serve-roles",
                                "--barriers", "30"])
    assert wait_launch(proc, 120) == 0, "".join(lines)
    time.sleep(0.2)
    found = [m.groups() for m in (DONE.search(l) for l in lines) if m]
    workers = sorted(int(r) for label, role, r, nw, ns in found if role == "worker")
    assert workers == [0, 1, 2, 3], "".join(lines)
    # The built-in servers and scheduler ran on their hosts and ended with the job.
    out = "".join(lines)
    for label in ("server 0", "server 1", "scheduler"):
        assert re.search(rf"\[launcher\] {label} on h\d \(pid \d+\) exited with status 0", out), out
    assert "every node left; the job is complete" in out, out
    for label, role, rank, nw, ns in found:
        assert (nw, ns) == ("4", "2")
        assert label == f"{role} {rank}"
    assert_nothing_left(sshbed, within=5)


def test_kill_9_of_a_remote_worker_fails_the_job_and_leaves_nothing(sshbed, tandem_bin_dir):
    proc, lines = start_launch(sshbed, tandem_bin_dir, HOSTFILE,
                               ["-n", "4", "-s", "1", "--command-runs-all-roles",
                                "--teardown-grace", "8"],
                               [str(tandem_bin_dir / "cluster_check"), "--barriers", "1000000",
                                "--sleep-ms", "5"])
    pids = {m.group(1): int(m.group(2)) for m in wait_for(lines, PID, 6, 60)}
    # Kill only once the job has formed: a node lost before that is waited
    # for (a replacement may still register), not reported as lost.
    wait_for(lines, FORMED, 1, 60)
    time.sleep(0.5)
    os.kill(pids["worker 3"], signal.SIGKILL)
    code = wait_launch(proc, 40)
    out = "".join(lines)
    assert code != 0, out
    assert re.search(r"lost worker 3 \(node \d+", out), out
    # The launcher's last line names the first failure it saw, with its host
    # (over ssh that may be a survivor's PeerLost exit rather than the kill,
    # whose report travels back through the victim's ssh connection).
    assert re.search(r"\[launcher\] job failed: (scheduler|server \d+|worker \d+) on h\d "
                     r"\(pid \d+\) exited with status \d+", out), out
    assert re.search(r"\[launcher\] worker 3 on h\d \(pid \d+\) exited with status 137", out), out
    assert_nothing_left(sshbed, within=10)


def test_kill_9_of_the_launcher_stops_every_remote_process(sshbed, tandem_bin_dir):
    proc, lines = start_launch(sshbed, tandem_bin_dir, HOSTFILE,
                               ["-n", "3", "-s", "1", "--command-runs-all-roles"],
                               [str(tandem_bin_dir / "cluster_check"), "--barriers", "1000000",
                                "--sleep-ms", "5"])
    wait_for(lines, PID, 5, 60)
    assert sum(len(p) for p in sshbed.job_pids().values()) >= 5
    killed = time.monotonic()
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its ssh clients, as a crash would
    proc.wait(timeout=10)
    assert_nothing_left(sshbed, within=10)
    assert time.monotonic() - killed < 12


def test_an_unreachable_host_is_diagnosed_before_anything_starts(sshbed, tandem_bin_dir):
    proc, lines = start_launch(sshbed, tandem_bin_dir, "h1\nnosuchhost\n", ["-n", "2", "-s", "0"],
                               [str(tandem_bin_dir / "cluster_check")])
    code = wait_launch(proc, 60)
    out = "".join(lines)
    assert code != 0, out
    assert "nosuchhost: ssh failed" in out, out
    assert "h1:" not in out.split("before the job started:")[-1], out
    assert not PID.search(out), out


def test_timeline_of_every_remote_process_is_merged(sshbed, tandem_bin_dir):
    """TANDEM_TIMELINE over ssh: each host's remote-exec names its process's
    file for the process, and the launcher, whose host shares the file
    system here, merges them into one trace."""
    from test_metrics_launch import check_collectives_trace
    trace = sshbed.dir / "trace.json"
    proc, lines = start_launch(sshbed, tandem_bin_dir, HOSTFILE,
                               ["-n", "3", "--no-scheduler", "--env",
                                f"TANDEM_TIMELINE={trace}"],
                               [str(tandem_bin_dir / "collective_check"), "--steady", "5"])
    assert wait_launch(proc, 120) == 0, "".join(lines)
    time.sleep(0.2)
    out = "".join(lines)
    assert "[launcher] timeline: merged 3 of 3 processes" in out and f"into {trace}" in out, out
    check_collectives_trace(trace, 3, 5)
    assert not list(sshbed.dir.glob("trace.json.*")), "per-process files left behind"


def test_max_restarts_restarts_every_process_on_every_host(sshbed, tandem_bin_dir):
    from test_launch_restart import LABELS, attempt_alive, starts
    proc, lines = start_launch(
        sshbed, tandem_bin_dir, HOSTFILE,
        ["-n", "2", "-s", "1", "--command-runs-all-roles", "--teardown-grace", "4",
         "--max-restarts", "2", "--restart-delay", "0.2"],
        [str(tandem_bin_dir / "restart_check"), "--fail-rank", "1", "--fail-until", "1"])
    code = wait_launch(proc, 90)
    time.sleep(0.2)  # the reader thread takes the last lines
    out = "".join(lines)
    assert code == 0, out
    first, second = starts(out, 0), starts(out, 1)
    assert set(first) == LABELS and set(second) == LABELS, out
    # TANDEM_RESTART_COUNT and TANDEM_MAX_RESTARTS reached every host.
    assert {p["max"] for p in (*first.values(), *second.values())} == {"2"}, out
    # The killed worker is the cause, whatever order the hosts' reports came in.
    assert re.search(r"\[launcher\] restarting the job \(restart 1 of 2\) after worker 1 on "
                     r"h\d \(pid \d+\) exited with status 137;", out), out
    assert out.count("[launcher] restarting the job") == 1, out
    assert "[launcher] job succeeded after 1 restart" in out, out
    survivors = [label for label, p in first.items() if attempt_alive(p["pid"], 0)]
    assert not survivors, f"{survivors} of the first attempt still run\n{out}"
    assert_nothing_left(sshbed, within=10)


def test_a_killed_remote_worker_leaves_an_elastic_job(sshbed, tandem_bin_dir):
    # --workers 3:4 over ssh: TANDEM_MIN_WORKERS=3 reaches the scheduler on
    # h1, which lets worker 3 (on h3) leave; the launcher, which sees its ssh
    # client exit with 137, lets it leave too, and the others finish.
    proc, lines = start_launch(sshbed, tandem_bin_dir, HOSTFILE,
                               ["--workers", "3:4", "-s", "1", "--teardown-grace", "8"],
                               [str(tandem_bin_dir / "cluster_check"), "--serve-roles",
                                "--barriers", "100", "--sleep-ms", "50"])
    pids = {m.group(1): int(m.group(2)) for m in wait_for(lines, PID, 4, 60)}
    wait_for(lines, FORMED, 1, 60)
    time.sleep(0.5)
    os.kill(pids["worker 3"], signal.SIGKILL)
    code = wait_launch(proc, 90)
    out = "".join(lines)
    assert code == 0, out
    assert "elastic job: a lost worker leaves it while 3 or more of 4 workers remain" in out, out
    assert re.search(r"\[launcher\] worker 3 on h3 \(pid \d+\) exited with status 137; the job "
                     r"goes on with 3 of 4 workers \(--workers 3:4\)", out), out
    assert re.search(r"\[launcher\] job succeeded with 3 of 4 workers \(--workers 3:4\); left the "
                     r"job: worker 3 on h3 \(pid \d+\) exited with status 137", out), out
    assert_nothing_left(sshbed, within=10)


def test_max_restarts_replaces_a_remote_worker_of_an_elastic_job(sshbed, tandem_bin_dir):
    # --workers 2:3 -s 0 --max-restarts 1 over ssh: worker 2 (on h2)
    # SIGKILLs itself at step 4; the launcher starts a new ssh client for
    # its place, whose elastic_train joins at a commit (step 7 at the
    # latest) and ends with the same weights as the survivors.
    proc, lines = start_launch(
        sshbed, tandem_bin_dir, HOSTFILE,
        ["--workers", "2:3", "-s", "0", "--max-restarts", "1", "--restart-delay", "0.2"],
        [str(tandem_bin_dir / "elastic_train"), "--steps", "12", "--dim", "8",
         "--leave", "2:4", "--wait-join-at", "7"])
    code = wait_launch(proc, 120)
    time.sleep(0.2)  # the reader thread takes the last lines
    out = "".join(lines)
    assert code == 0, out
    killed = re.search(r"\[launcher\] worker 2 on (h\d) \(pid (\d+)\) exited with status 137; "
                       r"the job goes on with 2 of 3 workers \(--workers 2:3\)", out)
    assert killed, out
    assert re.search(r"\[launcher\] started the replacement for worker 2 \(pid \d+, replacement "
                     r"1 of 1\)", out), out
    assert re.search(r"\[worker 2\] elastic_train: worker 2 trains from step [4-7] rank 2 size 3",
                     out), out
    weights = set(re.findall(r"elastic_train: worker \d done rank \d size 3 step 12 resets \d "
                             r"weights ([-0-9.e ]+)", out))
    assert len(weights) == 1, out
    assert len(re.findall(r"elastic_train: worker \d done rank", out)) == 3, out
    assert re.search(rf"\[launcher\] job succeeded with 3 of 3 workers \(--workers 2:3\) after "
                     rf"1 replacement; left the job: worker 2 on {killed.group(1)} \(pid "
                     rf"{killed.group(2)}\) exited with status 137", out), out
    assert "restarting the job" not in out, out
    assert_nothing_left(sshbed, within=10)


def _write_atomically(path, text: str) -> None:
    tmp = path.with_suffix(".new")
    tmp.write_text(text)
    tmp.rename(path)


def _wait_line(lines: list[str], pattern: str, proc, timeout: float = 60) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in list(lines):
            if m := re.search(pattern, line):
                return m
        assert proc.poll() is None, "".join(lines)
        time.sleep(0.05)
    raise AssertionError(f"no line matches {pattern!r}:\n" + "".join(lines))


def test_host_discovery_moves_a_worker_to_a_new_host(sshbed, tandem_bin_dir):
    # The script prints h1 and h2:2 (3 slots: worker 0 on h1, 1 and 2 on
    # h2); the test takes a slot from h2 (worker 2, the newest there, gets
    # SIGTERM and leaves; its replacement waits for a free slot), then lists
    # h3, where the replacement starts and joins the running job. All three
    # end with the same weights; nothing is left on any host.
    listed = sshbed.dir / "discovered"
    _write_atomically(listed, "h1\nh2:2\n")
    script = sshbed.dir / "discover.sh"
    script.write_text(f"#!/bin/sh\nexec cat {listed}\n")
    script.chmod(0o755)
    proc, lines = start_launch(
        sshbed, tandem_bin_dir, None,
        ["--host-discovery-script", str(script), "--discovery-interval", "0.2",
         "--workers", "2:3", "-s", "0", "--max-restarts", "1", "--restart-delay", "0.2"],
        [str(tandem_bin_dir / "elastic_train"), "--steps", "40", "--dim", "8", "--step-ms",
         "100", "--wait-join-at", "30"])
    try:
        _wait_line(lines, r"\[worker 2\] elastic_train: worker 2 trains from step 0", proc)
        _write_atomically(listed, "h1\nh2\n")
        stopped = _wait_line(lines, r"\[launcher\] worker 2 on h2 \(pid (\d+)\) has no slot "
                                    r"among the discovered hosts \(h2 has 1 slot\)", proc)
        _wait_line(lines, r"no discovered host has a free slot for worker 2 \(h1:1, h2:1\)", proc)
        _write_atomically(listed, "h1\nh2\nh3\n")
        code = wait_launch(proc, 120)
    finally:
        if proc.poll() is None:
            proc.kill()
            wait_launch(proc, 30)
    time.sleep(0.2)
    out = "".join(lines)
    assert code == 0, out
    assert "on 2 hosts (h1:1, h2:2, from" in out, out
    assert "the discovered hosts are now h1:1, h2:1, h3:1 (were h1:1, h2:1)" in out, out
    assert re.search(r"\[launcher\] started the replacement for worker 2 on h3 \(pid \d+, "
                     r"replacement 1 of 1\)", out), out
    starts = re.findall(r"\[worker 2\] elastic_train: worker 2 trains from step (\d+) rank 2 "
                        r"size 3", out)
    assert len(starts) == 2 and 1 <= int(starts[1]) <= 30, out  # the first, then the replacement
    weights = set(re.findall(r"elastic_train: worker \d done rank \d size 3 step 40 resets \d "
                             r"weights ([-0-9.e ]+)", out))
    assert len(weights) == 1, out
    assert len(re.findall(r"elastic_train: worker \d done rank", out)) == 3, out
    # ssh ends with 255 on SIGTERM (the remote worker loses its stdin and stops).
    assert (f"job succeeded with 3 of 3 workers (--workers 2:3) after 1 replacement; left the "
            f"job: worker 2 on h2 (pid {stopped.group(1)}) exited with status 255") in out, out
    assert_nothing_left(sshbed, within=10)


@pytest.mark.parametrize("script,args,message", [
    ("/bin/true", ["-H", "a,b", "--workers", "1:2", "-s", "0"],
     "--host-discovery-script /bin/true: the script gives the hosts; -H/--hostfile cannot be "
     "given with it"),
    ("/bin/true", ["--workers", "1:2", "-s", "0", "--launcher", "local"],
     "--host-discovery-script /bin/true is for --launcher ssh"),
    ("/bin/true", ["-n", "2", "-s", "0"],
     "--host-discovery-script /bin/true needs an elastic worker count, --workers MIN:MAX"),
    ("/bin/true", ["--workers", "1:2", "-s", "1"],
     "--host-discovery-script /bin/true needs a job without servers (-s 0)"),
    ("fails", ["--workers", "1:2", "-s", "0"],
     "the host discovery script {script} exited 4: no cloud today"),
    ("one-host", ["--workers", "2:3", "-s", "0"],
     "the host discovery script {script} found 1 worker slot (h1:1), fewer than the job's "
     "minimum of 2 workers (--workers MIN:MAX)"),
])
def test_host_discovery_refusals_name_what_is_wrong(tandem_bin_dir, tmp_path, script, args,
                                                   message):
    bodies = {"fails": "echo 'no cloud today' >&2; exit 4", "one-host": "echo h1"}
    if script in bodies:
        path = tmp_path / f"{script}.sh"
        path.write_text(f"#!/bin/sh\n{bodies[script]}\n")
        path.chmod(0o755)
        script = str(path)
    result = subprocess.run([str(tandem_bin_dir / "tandem"), "launch", "--host-discovery-script",
                             script, *args, "--", "true"], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 78, result.stderr
    assert message.format(script=script) in result.stderr, result.stderr
