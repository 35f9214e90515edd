"""Tear-down under `tandem launch --launcher mpi` and `--launcher slurm`, as
the local and ssh launchers are checked (test_cluster_launch.py,
test_launch_ssh.py): Ctrl-C (SIGINT to the launcher), SIGTERM to the
launcher and kill -9 of one worker each end every process of the job within
seconds (and under mpirun so does kill -9 of the launcher); the exit code is 130, 143, or the killed worker's 137, and the
launcher's last line says why, naming the failed rank and its host.

What is left is found by the PIDs the processes print and by the job's tag
(conftest.py: every process of the job inherits TANDEM_TEST_JOB_TAG through
mpirun and srun --export=ALL), never by a program's name. The Slurm cluster
is started once for the file (slurm_cluster.py); docs/launch.md,
"Tear-down" and "Through Open MPI" / "Through Slurm"."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import time

import pytest

from slurm_cluster import slurm_available, slurm_env  # noqa: F401 - a fixture

WORKERS = 3
SERVERS = 1
LABELS = ["scheduler", "server 0"] + [f"worker {i}" for i in range(WORKERS)]


def launcher_env(request, launcher: str) -> dict[str, str]:
    if launcher == "mpi":
        if shutil.which("mpirun") is None:
            pytest.skip("Open MPI's mpirun is not installed (openmpi-bin)")
        return {}
    reason = slurm_available()
    if reason:
        pytest.skip(reason)
    return request.getfixturevalue("slurm_env")


def start_long_job(launch, tandem_bin_dir, launcher: str, env: dict[str, str]):
    """A job of cluster_check processes that would run for hours; returns the
    job and the pid of each process by label, once every one has joined."""
    job = launch.start(WORKERS, SERVERS, [tandem_bin_dir / "cluster_check", "--barriers",
                                          "100000000", "--sleep-ms", "5"],
                       launcher=launcher, launcher_env=env,
                       extra_args=["--command-runs-all-roles", "--teardown-grace", "3"],
                       env={"PS_HEARTBEAT_INTERVAL": "0.5", "PS_HEARTBEAT_TIMEOUT": "4"})
    pids = {}
    for label in LABELS:
        m = job.wait_for_line(rf"\[{label}\] cluster_check: pid=(\d+)", timeout=90)
        pids[label] = int(m.group(1))
    # Kill only once the job has formed and runs its barriers: a node lost
    # before that is waited for, not reported as lost.
    job.wait_for_line(r"scheduler: all \d+ nodes registered", timeout=60)
    time.sleep(0.5)
    assert len(job.processes()) > len(LABELS), job.describe()
    return job, pids


def assert_all_gone(job, launcher: str, pids: dict[str, int], within: float) -> None:
    """Nothing of the job is left: no process carries its tag, and no pid
    the processes printed exists, not even as a zombie (whoever started it
    reaped it). Under Slurm a zombie adopted by init is allowed: srun ends a
    step by SIGKILL to every task's whole process tree (proctrack), so a
    rank's process may outlive its rank-exec by an instant and be handed to
    init, whose to reap it is (this test machine's init reaps late)."""
    job.assert_no_leftovers(grace=within)
    for label, pid in pids.items():
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except FileNotFoundError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        state, parent = fields[0], int(fields[1])
        assert launcher == "slurm" and state == "Z" and parent == 1, (
            f"{label} (pid {pid}) still exists: {stat}\n{job.describe()}")


def last_launcher_line(job) -> str:
    lines = [text for stream, text in job.lines if text.startswith("[launcher] ")]
    return lines[-1] if lines else ""


def rank_host(launcher: str) -> str:
    return "localhost" if launcher == "slurm" else socket.gethostname()


@pytest.mark.parametrize("launcher", ["mpi", "slurm"])
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_to_the_launcher_ends_every_process(request, launch, tandem_bin_dir, launcher,
                                                     sig, code):
    job, pids = start_long_job(launch, tandem_bin_dir, launcher, launcher_env(request, launcher))
    sent = time.monotonic()
    os.kill(job.proc.pid, sig)
    got = job.wait(timeout=30)
    elapsed = time.monotonic() - sent
    assert got == code, f"exit code {got}, expected {code}\n{job.describe()}"
    assert elapsed < 10, f"took {elapsed:.1f} s\n{job.describe()}"
    name = signal.Signals(sig).name
    assert last_launcher_line(job) == f"[launcher] job interrupted by {name}", job.describe()
    assert_all_gone(job, launcher, pids, within=5)


@pytest.mark.parametrize("launcher", ["mpi", "slurm"])
def test_kill_9_of_a_worker_ends_the_job_naming_its_rank_and_host(request, launch, tandem_bin_dir,
                                                                  launcher):
    job, pids = start_long_job(launch, tandem_bin_dir, launcher, launcher_env(request, launcher))
    killed = time.monotonic()
    os.kill(pids["worker 1"], signal.SIGKILL)
    got = job.wait(timeout=40)
    elapsed = time.monotonic() - killed
    assert got == 137, f"exit code {got}\n{job.describe()}"
    # The others notice within the heartbeat timeout (4 s) and the grace
    # period (3 s) bounds what follows.
    assert elapsed < 20, f"took {elapsed:.1f} s\n{job.describe()}"
    host = re.escape(rank_host(launcher))
    assert re.fullmatch(rf"\[launcher\] job failed: worker 1 on {host} \(pid {pids['worker 1']}\) "
                        r"killed by signal 9 \(SIGKILL\)", last_launcher_line(job)), job.describe()
    assert_all_gone(job, launcher, pids, within=5)


def test_kill_9_of_the_launcher_ends_every_rank_under_mpirun(launch, tandem_bin_dir):
    """The launcher cannot act once killed with SIGKILL: mpirun dies with it
    (PR_SET_PDEATHSIG), and each rank-exec, whose parent mpirun was, gets
    SIGTERM from its own death signal and ends its process."""
    job, pids = start_long_job(launch, tandem_bin_dir, "mpi", launcher_env(None, "mpi"))
    killed = time.monotonic()
    os.kill(job.proc.pid, signal.SIGKILL)
    job.wait(timeout=10)
    assert_all_gone(job, "mpi", pids, within=10)
    assert time.monotonic() - killed < 12, job.describe()
