"""A real one-machine Slurm for the system tests: munged, slurmctld and slurmd
(Debian's slurm-wlm and munge) with a configuration of their own in a
temporary directory, a single node `localhost` at 127.0.0.1, stopped by PID
when the module's tests are done. Test modules import `slurm_env` (a
module-scoped fixture yielding the environment srun needs) and
`requires_slurm` (their pytestmark) or ask `slurm_available()`."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import free_port

DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sinfo")



def slurm_available() -> str | None:
    """None when the test's Slurm can run here, else why not (a skip reason)."""
    if any(shutil.which(d) is None and not Path(f"/usr/sbin/{d}").exists() for d in DAEMONS):
        return "Slurm is not installed (slurm-wlm, munge)"
    if os.geteuid() != 0:
        return "the test's slurmd runs tasks as root"
    return None


requires_slurm = pytest.mark.skipif(slurm_available() is not None,
                                    reason=str(slurm_available()))

CONF = """\
ClusterName=tandemtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={d}/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
NodeName=localhost NodeAddr=127.0.0.1 CPUs=16 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""


def _daemon(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


@pytest.fixture(scope="module")
def slurm_env():
    """A running one-node Slurm; yields the environment srun needs."""
    d = Path(tempfile.mkdtemp(prefix="tandem-slurm."))
    procs: list[subprocess.Popen] = []
    try:
        (d / "state").mkdir()
        (d / "spool").mkdir()
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        (d / "slurm.conf").write_text(CONF.format(d=d, ctld_port=free_port(),
                                                  slurmd_port=free_port()))
        env = dict(os.environ, SLURM_CONF=str(d / "slurm.conf"))
        logs = open(d / "daemons.log", "w")
        procs.append(subprocess.Popen(
            [_daemon("munged"), "--force", "-F", f"--key-file={key}",
             f"--socket={d}/munge.sock", f"--pid-file={d}/munged.pid",
             f"--log-file={d}/munged.log", f"--seed-file={d}/munge.seed"],
            stdout=logs, stderr=subprocess.STDOUT))
        for _ in range(100):
            if (d / "munge.sock").exists():
                break
            time.sleep(0.05)
        procs.append(subprocess.Popen([_daemon("slurmctld"), "-D", "-f", str(d / "slurm.conf")],
                                      env=env, stdout=logs, stderr=subprocess.STDOUT))
        procs.append(subprocess.Popen([_daemon("slurmd"), "-D", "-N", "localhost", "-f",
                                       str(d / "slurm.conf")],
                                      env=env, stdout=logs, stderr=subprocess.STDOUT))
        state = ""
        for _ in range(120):
            state = subprocess.run([_daemon("sinfo"), "-h", "-o", "%T"], env=env,
                                   capture_output=True, text=True).stdout.strip()
            if state == "idle":
                break
            time.sleep(0.5)
        if state != "idle":
            pytest.fail(f"the test's Slurm node did not become idle (state '{state}'):\n"
                        + (d / "daemons.log").read_text()[-3000:])
        yield {"SLURM_CONF": str(d / "slurm.conf")}
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(d, ignore_errors=True)
