"""`tandem launch` as torchrun, horovodrun and mpirun users spell it: an
unchanged DDP script (Gloo, env://, no tandem import) and a Horovod-shaped
script run under `-n 2`, `-np 2`, `--nproc-per-node 2` and `-H
localhost:2`; without -s a job has no servers and no scheduler process, so
a plain command ends at once; tandem's own processes still start from the
DMLC contract; flags that disagree are usage errors (docs/launch.md,
"Usage")."""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from python_job import PYTHON, WORKERS_DIR


def torch_available() -> bool:
    return subprocess.run([PYTHON, "-c", "import torch.distributed"],
                          capture_output=True).returncode == 0


def run(tandem_bin_dir, args, program, timeout=120):
    argv = [str(tandem_bin_dir / "tandem"), "launch", *args, "--", *program]
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    return proc, time.monotonic() - start


SPELLINGS = [["-n", "2"], ["-np", "2"], ["--nproc-per-node", "2"], ["--nproc_per_node", "2"],
             ["-H", "localhost:2"], ["--nproc-per-node", "2", "--nnodes", "1"]]


@pytest.mark.skipif(not torch_available(), reason="PyTorch is not installed")
@pytest.mark.parametrize("args", SPELLINGS, ids=lambda a: " ".join(a))
def test_unchanged_ddp_script_runs(tandem_bin_dir, args):
    proc, _ = run(tandem_bin_dir, args, [PYTHON, str(WORKERS_DIR / "ddp_plain_worker.py")])
    assert proc.returncode == 0, proc.stderr
    lines = re.findall(r"\[worker (\d)\] ddp: (.*)", proc.stdout)
    assert sorted(lines) == [
        ("0", "rank=0 size=2 local_rank=0 local_size=2 group_rank=0 sum=3 grad=1.5"),
        ("1", "rank=1 size=2 local_rank=1 local_size=2 group_rank=0 sum=3 grad=1.5"),
    ], proc.stdout + proc.stderr


@pytest.mark.parametrize("args", SPELLINGS, ids=lambda a: " ".join(a))
def test_horovod_variables(tandem_bin_dir, args):
    proc, _ = run(tandem_bin_dir, args, [PYTHON, str(WORKERS_DIR / "horovod_env_worker.py")])
    assert proc.returncode == 0, proc.stderr
    lines = re.findall(r"\[worker (\d)\] horovod: (.*)", proc.stdout)
    assert sorted(lines) == [
        (str(r), f"HOROVOD_RANK={r} HOROVOD_SIZE=2 HOROVOD_LOCAL_RANK={r} HOROVOD_LOCAL_SIZE=2")
        for r in range(2)
    ], proc.stdout


def test_servers_and_scheduler_get_no_worker_variables(tandem_bin_dir):
    # --command-runs-all-roles: the command also runs as scheduler and server.
    proc, _ = run(tandem_bin_dir, ["-n", "2", "-s", "1", "--command-runs-all-roles"],
                  ["sh", "-c", 'echo "role=$DMLC_ROLE rank=${RANK-unset} '
                   'master=${MASTER_PORT:+set}"'])
    assert proc.returncode == 0, proc.stderr
    got = sorted(re.findall(r"\[(\w+(?: \d)?)\] (role=.*)", proc.stdout))
    assert got == [("scheduler", "role=scheduler rank=unset master="),
                   ("server 0", "role=server rank=unset master="),
                   ("worker 0", "role=worker rank=0 master=set"),
                   ("worker 1", "role=worker rank=1 master=set")], proc.stdout


def test_plain_command_ends_at_once(tandem_bin_dir):
    proc, seconds = run(tandem_bin_dir, ["-n", "2"], ["hostname"], timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert len(re.findall(r"^\[worker [01]\] \S+$", proc.stdout, re.M)) == 2, proc.stdout
    assert "0 servers" in proc.stderr and "(in worker 0)" in proc.stderr, proc.stderr
    assert seconds < 5, f"took {seconds:.1f} s"


def test_master_port_differs_from_the_scheduler(tandem_bin_dir):
    proc, _ = run(tandem_bin_dir, ["-n", "2"],
                  ["sh", "-c", 'echo "ports $MASTER_ADDR $MASTER_PORT $DMLC_PS_ROOT_PORT"'])
    assert proc.returncode == 0, proc.stderr
    ports = set(re.findall(r"ports (\S+) (\d+) (\d+)", proc.stdout))
    assert len(ports) == 1, proc.stdout  # the same on both workers
    addr, master, scheduler = ports.pop()
    assert addr == "127.0.0.1" and master != scheduler, proc.stdout


@pytest.mark.parametrize("args", [["-n", "2"], ["-np", "2", "-s", "1"]],
                         ids=lambda a: " ".join(a))
def test_tandem_processes_keep_the_dmlc_contract(tandem_bin_dir, args):
    """RANK, WORLD_SIZE and LOCAL_RANK also describe torchrun's contract;
    tandem's own processes must still start from the launcher's DMLC one."""
    proc, _ = run(tandem_bin_dir, args, [str(tandem_bin_dir / "collective_check")])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    contracts = re.findall(r"\[(worker \d|server \d|scheduler)\] .*start-up contract: (\S+):", out)
    workers = sorted(label for label, _ in contracts if label.startswith("worker"))
    assert workers == ["worker 0", "worker 1"], out
    assert {name for _, name in contracts} == {"dmlc"}, out


# Flags that disagree or malformed counts: one line, exit 2, before anything
# starts.
CONFLICTS = [
    (["--nproc-per-node", "2", "--nnodes", "2"],
     "--nnodes 2: the local launcher starts the job on this host only; use --launcher slurm"),
    (["-n", "3", "--nproc-per-node", "2"],
     "-n 3 disagrees with --nproc-per-node 2 x --nnodes 1 = 2 workers"),
    (["-H", "localhost:2", "--hostfile", "/etc/hosts"],
     "-H/--hosts and --hostfile both name the hosts"),
    (["-H", "localhost:x"], "-H localhost:x entry 1: slot count 'x' is not a number"),
    (["-H", "h1:2,h2:2", "--nnodes", "3"], "--nnodes 3 but -H/--hostfile names 2 hosts"),
    (["-n", "2", "-s", "1", "--no-scheduler"], "--no-scheduler starts only the workers"),
    (["-np", "x"], "--num-workers: 'x' is not a whole number"),
    (["--nproc-per-node", "0"], "the number of workers per node must be between 1 and 65536"),
    (["--nnodes", "x", "--nproc-per-node", "2"], "--nnodes: 'x' is not a whole number"),
]


@pytest.mark.parametrize("args,message", CONFLICTS, ids=lambda a: " ".join(a)
                         if isinstance(a, list) else None)
def test_disagreeing_flags_are_usage_errors(tandem_bin_dir, args, message):
    proc, _ = run(tandem_bin_dir, args, ["hostname"], timeout=30)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tandem: usage error: "), proc.stderr
    assert message in lines[0], proc.stderr
    assert proc.stdout == "", proc.stdout


def test_dash_np_after_the_separator_is_the_programs(tandem_bin_dir):
    """-np is rewritten for the launcher only: the program's own -np stays."""
    proc, _ = run(tandem_bin_dir, ["-np", "1"], ["echo", "-np", "3"], timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[worker 0] -np 3"], proc.stdout
