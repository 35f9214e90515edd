"""Jobs started as each launcher starts them (docs/contracts.md): the very
variables torchrun, a PyTorchJob, srun, an Indexed Job, a Volcano Job, a
TrainJob and tandem's own contract give every process (on loopback), and the
real `mpirun` of Open MPI. Each runs a collectives-only job
(tests/programs/collective_check: every result exact) and a parameter-server
job (tests/programs/kvstore_check with servers taken from the ranks, or
Volcano's scheduler/server/worker tasks: every pulled value in closed
form), and every process logs the contract it was started under."""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import free_port

# Variables of other launchers that must not leak into a test's processes.
CONTRACT_PREFIXES = ("DMLC_", "TANDEM_", "OMPI_", "PMI_", "SLURM_", "PET_", "VC_", "VK_",
                     "TORCHELASTIC_")
CONTRACT_NAMES = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                  "MASTER_ADDR", "MASTER_PORT", "JOB_COMPLETION_INDEX", "HOSTNAME"}


# What a job's launcher would hand every process: a job started by hand
# refuses to start without a secret (docs/security.md).
JOB_SECRET = "5e" * 32


def clean_env() -> dict[str, str]:
    """The test's environment without any launcher's variables, plus the
    job's TANDEM_SECRET as every process of a real job has it."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(CONTRACT_PREFIXES) and k not in CONTRACT_NAMES}
    env["TANDEM_SECRET"] = JOB_SECRET
    return env


def run_processes(argv, envs: list[dict[str, str]], tmp_path: Path, timeout: float = 90):
    """Starts one process per environment (as a launcher would), waits for all;
    returns [(returncode, output)]. Kills every one (by pid) on timeout."""
    return run_commands([(argv, env) for env in envs], tmp_path, timeout)


def run_commands(commands, tmp_path: Path, timeout: float = 90):
    """Starts one process per (argv, env), the environment over clean_env(),
    waits for all; returns [(returncode, output)]. Kills every one (by pid)
    on timeout."""
    procs = []
    for i, (argv, env) in enumerate(commands):
        out = open(tmp_path / f"proc{i}.log", "w+b")
        procs.append((subprocess.Popen([str(a) for a in argv], env={**clean_env(), **env},
                                       stdin=subprocess.DEVNULL, stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True), out))
    end = time.monotonic() + timeout
    results = []
    try:
        for proc, out in procs:
            proc.wait(timeout=max(0.1, end - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for proc, out in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
            out.seek(0)
            results.append((proc.returncode, out.read().decode(errors="replace")))
            out.close()
    return results


def assert_all_ok(results):
    for i, (code, output) in enumerate(results):
        assert code == 0, f"process {i} exited {code}:\n{output}"


# -- what each job checks ---------------------------------------------------------


def check_collectives(outputs: list[str], world: int, contract: str):
    ranks = []
    for output in outputs:
        m = re.search(r"collective_check: ok rank=(\d+) size=(\d+) checks=(\d+)", output)
        assert m, output
        assert int(m.group(2)) == world and int(m.group(3)) > 200, m.group(0)
        ranks.append(int(m.group(1)))
        assert f"start-up contract: {contract}" in output, output
    assert sorted(ranks) == list(range(world))
    assert sum("worker 0 hosts the rendezvous in-process" in o for o in outputs) == 1


def kv_lines(output: str) -> dict[str, str]:
    return dict(re.findall(r"^kvstore_check: (.+?) (sum=\S+ at=\S+|\S+)$", output, re.M))


def check_kvstore(outputs: list[str], workers: int, servers: int, contract: str):
    """The 'sync' scenario's values in closed form for `workers` workers."""
    tri = workers * (workers + 1) // 2
    done = [o for o in outputs if "kvstore_check: done" in o]
    assert len(done) == workers, outputs
    ranks = set()
    for output in done:
        m = re.search(r"done scenario=sync rank=(\d+) workers=(\d+) servers=(\d+)", output)
        assert m and int(m.group(2)) == workers and int(m.group(3)) == servers, output
        ranks.add(int(m.group(1)))
        seen = kv_lines(output)
        assert [float(v) for v in seen["k0 init"].split(",")] == list(range(20))
        for r in (1, 2, 3):
            got = [float(v) for v in seen[f"k0 round{r}"].split(",")]
            assert got == [tri * (i % 7 + r) for i in range(20)], (r, got)
        n = 1000003
        m = re.fullmatch(r"sum=([-0-9.e+]+) at=(.*)", seen["k1 big"])
        assert float(m.group(1)) == sum(tri * (i % 13) for i in range(n))
        for item in m.group(2).split(","):
            i, v = item.split(":")
            assert float(v) == tri * (int(i) % 13), (i, v)
        got = [float(v) for v in seen["k2 fp16"].split(",")]
        assert got == [tri * (i % 5) + 0.5 * workers for i in range(33)]
        got = [float(v) for v in seen["k6 after-bad"].split(",")]
        assert got == [sum(r * i for r in range(workers)) for i in range(6)]
    assert ranks == set(range(workers))
    for output in outputs:
        assert f"start-up contract: {contract}" in output, output


# -- the launchers' variables -------------------------------------------------------


def torchrun_envs(world: int, port: int) -> list[dict[str, str]]:
    # torchrun --nnodes 2 --nproc-per-node world/2 (static rendezvous): the
    # agent's store listens at MASTER_PORT; workers reuse it.
    local = world // 2 if world % 2 == 0 else world
    return [{"RANK": str(r), "WORLD_SIZE": str(world), "LOCAL_RANK": str(r % local),
             "LOCAL_WORLD_SIZE": str(local), "GROUP_RANK": str(r // local),
             "ROLE_RANK": str(r), "ROLE_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
             "MASTER_PORT": str(port), "TORCHELASTIC_RUN_ID": "none",
             "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "0",
             "TORCHELASTIC_MAX_RESTARTS": "0", "OMP_NUM_THREADS": "1"} for r in range(world)]


def pytorchjob_envs(world: int, port: int) -> list[dict[str, str]]:
    # Kubeflow's PyTorchJob, one process per pod (nprocPerNode 1), no torchrun.
    return [{"RANK": str(r), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
             "MASTER_PORT": str(port), "PET_NPROC_PER_NODE": "1", "PET_NNODES": str(world),
             "PET_NODE_RANK": str(r), "PET_MASTER_ADDR": "127.0.0.1",
             "PET_MASTER_PORT": str(port)} for r in range(world)]


def slurm_envs(world: int, port: int) -> list[dict[str, str]]:
    # srun -N 2 -n world (block distribution) in job J, step S, where
    # 10000 + (J * 16 + S) mod 22768 is `port` (the coordinator port tandem
    # derives when MASTER_PORT is absent).
    job, step = divmod(port - 10000, 16)
    first = (world + 1) // 2  # block distribution: node 0 gets the extra task
    counts = f"{first}(x2)" if world % 2 == 0 else f"{first},{world - first}"
    return [{"SLURM_JOB_ID": str(job), "SLURM_JOBID": str(job), "SLURM_STEP_ID": str(step),
             "SLURM_STEPID": str(step), "SLURM_PROCID": str(r), "SLURM_NTASKS": str(world),
             "SLURM_STEP_NUM_TASKS": str(world), "SLURM_STEP_NUM_NODES": "2",
             "SLURM_NNODES": "2", "SLURM_NODEID": str(0 if r < first else 1),
             "SLURM_LOCALID": str(r if r < first else r - first),
             "SLURM_STEP_TASKS_PER_NODE": counts, "SLURM_TASKS_PER_NODE": counts,
             "SLURM_STEP_NODELIST": "localhost,127.0.0.1", "SLURM_NODELIST": "localhost,127.0.0.1",
             "SLURM_JOB_NODELIST": "localhost,127.0.0.1"} for r in range(world)]


def indexed_job_envs(world: int, port: int) -> list[dict[str, str]]:
    # An Indexed Job whose manifest injects WORLD_SIZE and the coordinator.
    return [{"JOB_COMPLETION_INDEX": str(r), "WORLD_SIZE": str(world),
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
             "HOSTNAME": f"train-{r}"} for r in range(world)]


def volcano_envs(world: int, port: int) -> list[dict[str, str]]:
    # A Volcano Job with one task "trainer" (env and svc plugins).
    hosts = ",".join("localhost" for _ in range(world))
    return [{"VC_TASK_INDEX": str(r), "VK_TASK_INDEX": str(r), "VC_TRAINER_HOSTS": hosts,
             "VC_TRAINER_NUM": str(world), "HOSTNAME": f"job-trainer-{r}",
             "MASTER_PORT": str(port)} for r in range(world)]


def trainjob_envs(world: int, port: int) -> list[dict[str, str]]:
    # Kubeflow Trainer's TrainJob, a command run directly, one process per node.
    return [{"PET_NNODES": str(world), "PET_NODE_RANK": str(r), "PET_NPROC_PER_NODE": "1",
             "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(port)}
            for r in range(world)]


def tandem_envs(world: int, port: int) -> list[dict[str, str]]:
    return [{"TANDEM_WORLD_SIZE": str(world), "TANDEM_RANK": str(r),
             "TANDEM_LOCAL_RANK": str(r), "TANDEM_LOCAL_SIZE": str(world),
             "TANDEM_COORDINATOR": f"127.0.0.1:{port}"} for r in range(world)]


LAUNCHERS = {
    "torchrun": torchrun_envs,
    "pytorchjob": pytorchjob_envs,
    "slurm": slurm_envs,
    "indexed-job": indexed_job_envs,
    "volcano": volcano_envs,
    "trainjob": trainjob_envs,
    "tandem": tandem_envs,
}


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def coordinator_port() -> int:
    """A free port in Slurm's derived range (10000..32767) with a free port
    above it (the torchrun contract's rendezvous takes MASTER_PORT + 1)."""
    for _ in range(100):
        port = random.randrange(10001, 32767)
        if port_is_free(port) and port_is_free(port + 1) and port_is_free(port - 1):
            return port
    pytest.skip("no free triple of ports in 10000..32767")


class AgentStore:
    """Holds MASTER_PORT the way torchrun's agent store does."""

    def __init__(self, port: int):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen()

    def close(self):
        self.sock.close()


def start_as(launcher: str, argv, world: int, tmp_path: Path, extra=None):
    port = coordinator_port()
    store = None
    if launcher == "torchrun":
        # The agent's store holds MASTER_PORT; tandem takes the free port above.
        for _ in range(20):
            try:
                store = AgentStore(port - 1)
                break
            except OSError:
                port = coordinator_port()
        assert store is not None
        port -= 1
    envs = LAUNCHERS[launcher](world, port)
    for env in envs:
        env.update(extra or {})
    try:
        return run_processes(argv, envs, tmp_path)
    finally:
        if store:
            store.close()


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_collectives_job_under_each_launchers_variables(tandem_bin_dir, tmp_path, launcher):
    results = start_as(launcher, [tandem_bin_dir / "collective_check"], 4, tmp_path)
    assert_all_ok(results)
    check_collectives([o for _, o in results], 4, launcher)


@pytest.mark.parametrize("launcher", ["torchrun", "slurm", "indexed-job", "tandem"])
def test_parameter_server_job_under_each_launchers_variables(tandem_bin_dir, tmp_path, launcher):
    # 5 processes: ranks 0..2 are workers, 3 and 4 servers.
    results = start_as(launcher, [tandem_bin_dir / "kvstore_check", "--scenario", "sync"], 5,
                       tmp_path, extra={"TANDEM_NUM_SERVERS": "2"})
    assert_all_ok(results)
    check_kvstore([o for _, o in results], 3, 2, launcher)


def test_volcano_tasks_named_for_roles_run_a_scheduler_servers_and_workers(tandem_bin_dir,
                                                                           tmp_path):
    # The svc plugin's host lists name pods; here each "pod name" is a
    # loopback name or address (no DNS query leaves the machine), and the
    # scheduler's is "localhost", where every other process finds it.
    port = coordinator_port()
    hosts = {"scheduler": ["localhost"], "server": ["127.0.0.2", "127.0.0.3"],
             "worker": ["127.0.0.4", "127.0.0.5"]}
    common = {"MASTER_PORT": str(port)}
    for task, names in hosts.items():
        common[f"VC_{task.upper()}_HOSTS"] = ",".join(names)
        common[f"VC_{task.upper()}_NUM"] = str(len(names))
    envs = [{**common, "VC_TASK_INDEX": str(i), "HOSTNAME": name}
            for names in hosts.values() for i, name in enumerate(names)]
    results = run_processes([tandem_bin_dir / "kvstore_check", "--scenario", "sync"], envs,
                            tmp_path)
    assert_all_ok(results)
    outputs = [o for _, o in results]
    check_kvstore(outputs, 2, 2, "volcano")
    assert "-> scheduler 0; scheduler at localhost:" in outputs[0], outputs[0]
    assert "-> server 1; scheduler at localhost:" in outputs[2], outputs[2]


# -- the real mpirun ---------------------------------------------------------------------


def mpirun_argv(np: int, port: int, extra: dict[str, str] | None = None) -> list[str]:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not installed (openmpi-bin)")
    argv = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(np), "--bind-to", "none",
            "--mca", "oob_tcp_if_include", "lo", "--mca", "btl_tcp_if_include", "lo",
            "--tag-output", "-x", "MASTER_ADDR=127.0.0.1", "-x", f"MASTER_PORT={port}"]
    for k, v in (extra or {}).items():
        argv += ["-x", f"{k}={v}"]
    return argv


def mpirun(argv, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(argv, env=clean_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # mpirun's own group: it and its daemons
        out, _ = proc.communicate()
        raise AssertionError(f"mpirun did not finish in {timeout} s:\n{out}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, "")


def split_tagged(output: str, np: int) -> list[str]:
    """mpirun --tag-output prefixes lines with [jobid,rank]<stdout|stderr>:."""
    per = [[] for _ in range(np)]
    for line in output.splitlines():
        m = re.match(r"^\[\d+,(\d+)\]<std(?:out|err)>:\s?(.*)$", line)
        if m:
            per[int(m.group(1))].append(m.group(2))
    return ["\n".join(lines) for lines in per]


# mpirun's processes reach its PMIx server, so the pmix contract wins over
# OMPI_*; with MASTER_ADDR given nothing is exchanged (test_contracts_pmix.py
# runs mpirun without it).
def test_collectives_job_under_real_mpirun(tandem_bin_dir):
    argv = mpirun_argv(4, coordinator_port()) + [str(tandem_bin_dir / "collective_check")]
    proc = mpirun(argv)
    assert proc.returncode == 0, proc.stdout
    check_collectives(split_tagged(proc.stdout, 4), 4, "pmix")


def test_parameter_server_job_under_real_mpirun(tandem_bin_dir):
    argv = mpirun_argv(4, coordinator_port(), {"TANDEM_NUM_SERVERS": "2"})
    argv += [str(tandem_bin_dir / "kvstore_check"), "--scenario", "sync"]
    proc = mpirun(argv)
    assert proc.returncode == 0, proc.stdout
    check_kvstore(split_tagged(proc.stdout, 4), 2, 2, "pmix")


# -- what goes wrong is said ------------------------------------------------------------


def test_peers_without_a_coordinator_are_refused_naming_the_variables(tandem_bin_dir, tmp_path):
    envs = [{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}]
    [(code, output)] = run_processes([tandem_bin_dir / "collective_check"], envs, tmp_path, 30)
    assert code != 0
    assert "ompi gives rank 1 of 2 but no rendezvous address" in output, output
    assert "TANDEM_COORDINATOR" in output and "MASTER_ADDR" in output, output


def test_a_process_alone_runs_without_any_contract(tandem_bin_dir, tmp_path):
    [(code, output)] = run_processes([tandem_bin_dir / "collective_check"], [{}], tmp_path, 60)
    assert code == 0, output
    assert "collective_check: ok rank=0 size=1" in output, output
    assert "start-up contract: single" in output, output
