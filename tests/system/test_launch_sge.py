"""`tandem launch --launcher sge` under a real one-machine Grid Engine cell:
the test starts sge_qmaster and sge_execd (Debian's gridengine packages,
which scripts/install-deps.sh installs) with a cell of their own in a
temporary directory, a queue on localhost and a parallel environment with
control_slaves TRUE (tests/system/sge_cell.py).

- From outside a job, the launcher submits itself (qrsh -pe tandem SLOTS)
  and the launcher inside starts every process as a task of the job with
  qrsh -inherit: a parameter-server job gives its exact sums; kill -9 of a
  worker ends the job with 137, naming the worker, and Ctrl-C or SIGTERM
  with 130 or 143, each with no process and no job left.
- Inside a job script (qsub -pe), the launcher uses the job's slots: a
  collectives job checks every operation.
- Without the launcher: an array job's tasks find their ranks in
  SGE_TASK_ID (the coordinator given, as Grid Engine names none), and a task
  that qrsh -inherit started, which Grid Engine gives no rank, is refused.

docs/launch.md, "Through Grid Engine"; docs/contracts.md, "Grid Engine"."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import TAG_VARIABLE, free_port, processes_with_tag
from sge_cell import PE, requires_sge, sge_cell  # noqa: F401 - a fixture
from test_contracts_start import check_collectives, clean_env
from test_kvstore_launch import LINE, SERVERS, WORKERS, check_sync_scenario

pytestmark = requires_sge


def last_launcher_line(job) -> str:
    lines = [text for _, text in job.lines if text.startswith("[launcher] ")]
    return lines[-1] if lines else ""


def assert_gone(pids, job, grace: float = 15.0) -> None:
    """None of `pids` exists `grace` s from now, except as a zombie adopted by
    init: when Grid Engine deletes a job it kills the launcher inside with
    SIGKILL, and the qrsh clients that die with it are handed to init, whose
    to reap them (this test machine's init reaps late). Grid Engine's own
    processes of a task (qrsh_starter) end after the task's, as its shepherd
    cleans up, so each may still be exiting when the launcher has ended."""
    end = time.monotonic() + grace
    for pid in pids:
        while True:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except FileNotFoundError:
                break
            fields = stat[stat.rfind(")") + 2:].split()
            if fields[0] == "Z" and fields[1] == "1":
                break
            assert time.monotonic() < end, (
                f"pid {pid} of the job still exists {grace} s after the launcher ended: "
                f"{stat}\n{job.describe()}")
            time.sleep(0.1)


def qsub(cell, argv, tmp_path: Path, options=(), env=None, timeout=120):
    """Runs `qsub -sync y -cwd -V -b y -j y [options] argv`, its output in a
    file per task (job.<task>.log; job.0.log outside an array job); returns
    qsub's exit code, the text of those files by name, and the tag that
    every process of the job carries."""
    tag = os.urandom(8).hex()
    full_env = {**clean_env(), **cell.env, **(env or {}), TAG_VARIABLE: tag}
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    command = ["qsub", "-sync", "y", "-cwd", "-V", "-b", "y", "-j", "y", "-N", "tandemtest",
               "-o", f"{out}/job.$TASK_ID.log", *options, *[str(a) for a in argv]]
    try:
        done = subprocess.run(command, env=full_env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        subprocess.run(["qdel", "-f", "-u", "*"], env=full_env, capture_output=True, timeout=30)
        raise
    outputs = {p.name: p.read_text(errors="replace") for p in sorted(out.iterdir())}
    assert re.search(r"Your job(-array)? \d+", done.stdout), done.stdout + done.stderr
    return done.returncode, outputs, tag


def test_parameter_server_job_submitted_from_outside_gives_exact_sums(launch, tandem_bin_dir,
                                                                      sge_cell):
    result = launch(WORKERS, SERVERS, [tandem_bin_dir / "kvstore_check", "--scenario", "sync"],
                    launcher="sge", launcher_env=sge_cell.env, extra_args=["--sge-pe", PE],
                    timeout=120)
    out = result.output
    assert result.returncode == 0, result.job.describe()
    processes = 1 + SERVERS + WORKERS
    assert re.search(rf"^\[launcher\] job job-[0-9a-f]+: submitting it to Grid Engine through qrsh "
                     rf"in parallel environment {PE} with {processes} slots \(a scheduler, "
                     rf"{SERVERS} servers and {WORKERS} workers\)$", out, re.M), out
    # The launcher inside the job says where it started everything.
    assert re.search(rf"^\[launcher\] job job-[0-9a-f]+: scheduler at localhost:\d+ through qrsh "
                     rf"-inherit in Grid Engine job \d+, {SERVERS} servers, {WORKERS} workers on "
                     r"1 host$", out, re.M), out
    for rank in range(WORKERS):
        assert (f"[worker {rank}] kvstore_check: done scenario=sync rank={rank} "
                f"workers={WORKERS} servers={SERVERS}") in out, out
    seen: dict[int, dict[str, str]] = {r: {} for r in range(WORKERS)}
    for rank, label, value in LINE.findall(out):
        seen[int(rank)][label] = value
    check_sync_scenario(out, seen)
    sge_cell.assert_empty()


def test_collectives_job_in_a_qsub_job_script_checks_every_operation(tandem_bin_dir, sge_cell,
                                                                     tmp_path):
    workers = 3
    code, outputs, tag = qsub(sge_cell, [tandem_bin_dir / "tandem", "launch", "--launcher", "sge",
                                         "-n", workers, "--", tandem_bin_dir / "collective_check"],
                              tmp_path, options=["-pe", PE, str(workers)])
    out = outputs["job.0.log"]
    assert code == 0, out
    assert re.search(rf"^\[launcher\] job job-[0-9a-f]+: scheduler at localhost:\d+ \(in worker "
                     rf"0\) through qrsh -inherit in Grid Engine job \d+, 0 servers, {workers} "
                     r"workers on 1 host$", out, re.M), out
    for rank in range(workers):
        m = re.search(rf"^\[worker {rank}\] collective_check: ok rank={rank} size={workers} "
                      r"checks=(\d+)$", out, re.M)
        assert m and int(m.group(1)) > 200, out
        # Each task found its contract in what the launcher gave it on stdin.
        assert re.search(rf"^\[worker {rank}\] .*start-up contract: dmlc: worker .*"
                         r"\[also present, ignored: torchrun, sge\]$", out, re.M), out
    assert not processes_with_tag(tag)
    sge_cell.assert_empty()


def test_kill_9_of_a_worker_ends_the_job_naming_it_and_leaves_nothing(launch, tandem_bin_dir,
                                                                     sge_cell):
    """A parameter-server job of push/pull rounds (kv_rounds: a survivor
    that loses its peer exits with PeerLost's 200, as tandem programs do);
    kill -9 of worker 1's process, found by the job's tag and its role."""
    job = launch.start(3, 1, [tandem_bin_dir / "kv_rounds", "--seconds", "300", "--small", "100",
                              "--big", "1000", "--report-every", "5"],
                       launcher="sge", launcher_env=sge_cell.env,
                       extra_args=["--sge-pe", PE, "--teardown-grace", "3"],
                       env={"PS_HEARTBEAT_INTERVAL": "0.5", "PS_HEARTBEAT_TIMEOUT": "4"})
    for rank in range(3):
        job.wait_for_line(rf"\[worker {rank}\] kv_rounds: rank={rank} round=\d+ ok", timeout=60)
    victims = [p for p in job.role_processes("worker")
               if p.env.get("DMLC_WORKER_ID") == "1" and p.argv[0].endswith("kv_rounds")]
    assert len(victims) == 1, (victims, job.describe())
    job_pids = [p.pid for p in job.processes() if p.pid != job.proc.pid]
    killed = time.monotonic()
    os.kill(victims[0].pid, signal.SIGKILL)
    got = job.wait(timeout=40)
    elapsed = time.monotonic() - killed
    assert got == 137, f"exit code {got}\n{job.describe()}"
    assert elapsed < 20, f"took {elapsed:.1f} s\n{job.describe()}"
    # The launcher inside the job names the task (the pid is its qrsh's:
    # the task's remote-exec exited 137 for its process's SIGKILL) as the
    # cause, whichever end it saw first (the survivors' PeerLost, 200, often
    # comes back sooner than the victim's qrsh), and ends with that report;
    # the launcher outside relays it.
    failed = r"worker 1 on localhost \(pid \d+\) exited with status 137"
    assert re.search(rf"^\[launcher\] job failed: {failed}(: .*)?$", job.output,
                     re.M), job.describe()
    assert re.search(rf"^\[rank-exec\] job failed: {failed}$", job.output, re.M), job.describe()
    assert re.fullmatch(rf"\[launcher\] job failed: {failed}", last_launcher_line(job)), \
        job.describe()
    for rank in (0, 2):
        assert re.search(rf"^\[worker {rank}\] kv_rounds \(worker {rank}, pid \d+ on \S+\): "
                         r"error: .*lost worker 1", job.output, re.M), job.describe()
    job.assert_no_leftovers(grace=5)
    assert_gone(job_pids, job)
    sge_cell.assert_empty()


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_to_the_submitting_launcher_deletes_the_job(launch, tandem_bin_dir, sge_cell,
                                                            sig, code):
    """Ctrl-C (or SIGTERM) to the launcher outside the job ends its qrsh
    (with SIGINT: qrsh stays on SIGTERM), and Grid Engine deletes the job:
    every task's process ends, and no job is left."""
    job = launch.start(2, 1, [tandem_bin_dir / "kv_rounds", "--seconds", "300", "--small", "100",
                              "--big", "1000", "--report-every", "5"],
                       launcher="sge", launcher_env=sge_cell.env, extra_args=["--sge-pe", PE])
    for rank in range(2):
        job.wait_for_line(rf"\[worker {rank}\] kv_rounds: rank={rank} round=\d+ ok", timeout=60)
    job_pids = [p.pid for p in job.processes() if p.pid != job.proc.pid]
    sent = time.monotonic()
    os.kill(job.proc.pid, sig)
    assert job.wait(timeout=30) == code, job.describe()
    assert time.monotonic() - sent < 4, job.describe()  # not the SIGKILL 5 s later
    assert last_launcher_line(job) == f"[launcher] job interrupted by {sig.name}", job.describe()
    job.assert_no_leftovers(grace=10)
    assert_gone(job_pids, job)
    sge_cell.assert_empty()


def test_array_job_tasks_find_their_ranks_without_the_launcher(tandem_bin_dir, sge_cell, tmp_path):
    """qsub -t 1-3 of collective_check alone: SGE_TASK_ID gives the rank;
    Grid Engine names no host for task 1, so the job says where rank 0
    listens (all tasks run on this one host)."""
    code, outputs, _ = qsub(sge_cell, [tandem_bin_dir / "collective_check"], tmp_path,
                            options=["-t", "1-3"],
                            env={"TANDEM_COORDINATOR": f"127.0.0.1:{free_port()}"})
    assert code == 0, outputs
    assert sorted(outputs) == ["job.1.log", "job.2.log", "job.3.log"], outputs
    check_collectives(list(outputs.values()), 3, "sge")
    for task in (1, 2, 3):
        assert (f"start-up contract: sge: rank {task - 1} of 3 (local 0 of 1, node {task - 1} of "
                "3), coordinator 127.0.0.1:") in outputs[f"job.{task}.log"], outputs
    sge_cell.assert_empty()


def test_a_task_started_by_qrsh_inherit_is_refused_for_want_of_a_rank(tandem_bin_dir, sge_cell,
                                                                     tmp_path):
    code, outputs, _ = qsub(sge_cell, ["/usr/bin/qrsh", "-inherit", "-noshell", "localhost",
                                       tandem_bin_dir / "collective_check"],
                            tmp_path, options=["-pe", PE, "2"])
    out = outputs["job.0.log"]
    assert code == 2, out
    assert re.search(r"collective_check: error: JOB_NAME=petask: Grid Engine started this process "
                     r"with qrsh -inherit as a task of parallel job \d+ \(NSLOTS=2\), and such a "
                     r"task gets no rank from Grid Engine: start the job's processes with "
                     r"`tandem launch --launcher sge`", out), out
    sge_cell.assert_empty()
