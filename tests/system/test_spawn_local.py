"""`tandem spawn-local` (docs/contracts.md, "Several processes per node"):
two "pods" on loopback, each one `tandem spawn-local` with the variables a
TrainJob (or a PyTorchJob) gives a pod asking for PET_NPROC_PER_NODE=2,
starting tests/programs/collective_check twice as torchrun would. Every
result is exact, every process logs the contract it was read under, and a
child killed with SIGKILL ends its pod's other process and fails the job
naming it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from test_contracts_start import clean_env, coordinator_port, run_processes

NPROC = 2
NODES = 2


def trainjob_pods(port: int) -> list[dict[str, str]]:
    return [{"PET_NNODES": str(NODES), "PET_NODE_RANK": str(n),
             "PET_NPROC_PER_NODE": str(NPROC), "PET_MASTER_ADDR": "127.0.0.1",
             "PET_MASTER_PORT": str(port)} for n in range(NODES)]


def pytorchjob_pods(port: int) -> list[dict[str, str]]:
    # training-operator: RANK is the pod's index, WORLD_SIZE counts processes.
    return [{"RANK": str(n), "WORLD_SIZE": str(NODES * NPROC), "MASTER_ADDR": "127.0.0.1",
             "MASTER_PORT": str(port), "PET_NNODES": str(NODES), "PET_NODE_RANK": str(n),
             "PET_NPROC_PER_NODE": str(NPROC)} for n in range(NODES)]


PODS = {"trainjob": trainjob_pods, "pytorchjob": pytorchjob_pods}


def spawn_argv(bin_dir: Path, *args: str) -> list[str]:
    return [str(bin_dir / "tandem"), "spawn-local", "--", str(bin_dir / "collective_check"),
            *args]


@pytest.mark.parametrize("source", sorted(PODS))
def test_two_pods_of_two_processes_run_a_collectives_job(tandem_bin_dir, tmp_path, source):
    port = coordinator_port()
    results = run_processes(spawn_argv(tandem_bin_dir), PODS[source](port), tmp_path)
    world = NODES * NPROC
    seen = []
    for node, (code, output) in enumerate(results):
        assert code == 0, f"pod {node} exited {code}:\n{output}"
        first = node * NPROC
        assert (f"[spawn-local] {source}: node {node} of {NODES}, {NPROC} processes "
                f"(ranks {first}..{first + NPROC - 1} of {world}), master 127.0.0.1:{port}"
                in output), output
        for local in range(NPROC):
            rank = first + local
            # Each line carries its process's label; the contract read in the
            # child is spawn-local with torchrun's numbers.
            assert (f"[rank {rank}] " in output), output
            m = re.search(rf"^\[rank {rank}\] .*collective_check: ok rank=(\d+) size=(\d+) "
                          rf"checks=(\d+)", output, re.M)
            assert m, output
            assert int(m.group(1)) == rank and int(m.group(2)) == world
            assert int(m.group(3)) > 200
            assert re.search(rf"^\[rank {rank}\] .*start-up contract: spawn-local: rank {rank} "
                             rf"of {world} \(local {local} of {NPROC}, node {node} of {NODES}\), "
                             rf"coordinator 127\.0\.0\.1:{port}", output, re.M), output
            seen.append(rank)
    assert sorted(seen) == list(range(world))
    assert sum(o.count("worker 0 hosts the rendezvous in-process") for _, o in results) == 1


def test_a_child_killed_by_sigkill_ends_its_pod_and_fails_the_job(tandem_bin_dir, tmp_path):
    # collective_check --die-rank 3: rank 3 (pod 1, local 1) sends itself
    # SIGKILL after two allreduces.
    port = coordinator_port()
    results = run_processes(spawn_argv(tandem_bin_dir, "--die-rank", "3"), trainjob_pods(port),
                            tmp_path, timeout=60)
    (code0, out0), (code1, out1) = results
    assert code1 == 128 + signal.SIGKILL, out1
    assert re.search(r"\[launcher\] rank 3 \(pid \d+\) killed by signal 9 \(SIGKILL\); tearing "
                     r"down the job", out1), out1
    assert re.search(r"\[launcher\] job failed: rank 3 \(pid \d+\) killed by signal 9", out1), out1
    assert "[rank 2] " in out1 and "rank 2 (pid" in out1, out1  # its pod's other process ended
    # The other pod's processes lose their peer and fail; the pod says which.
    assert code0 != 0, out0
    assert re.search(r"\[launcher\] job failed: rank [01] \(pid \d+\)", out0), out0
    assert "PeerLost" in out0, out0


def children_by_rank(pid: int) -> dict[int, int]:
    """The children of `pid` that run their command, by the RANK in their
    environment (a child between fork and execve still has its parent's,
    without RANK, and is left out)."""
    out = {}
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        try:
            environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError):
            continue
        ranks = [int(v[5:]) for v in environ if v.startswith(b"RANK=")]
        if ranks:
            out[ranks[0]] = int(child)
    return out


def gone(pid: int) -> bool:
    path = Path(f"/proc/{pid}/stat")
    return not path.exists() or path.read_text().split()[2] == "Z"


def run_steady_pod(bin_dir: Path, tmp_path: Path, signal_to, signum: int):
    """One pod of a one-node job, two processes in a steady loop of
    allreduces; once they run, sends `signum` to the pid `signal_to(pod pid,
    children by rank)` names. Returns (exit code, output, children by rank)."""
    port = coordinator_port()
    env = {**clean_env(), "PET_NNODES": "1", "PET_NODE_RANK": "0", "PET_NPROC_PER_NODE": "2",
           "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(port)}
    log = open(tmp_path / "pod.log", "w+b")
    pod = subprocess.Popen(spawn_argv(bin_dir, "--steady", "300"), env=env,
                           stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(children_by_rank(pod.pid)) < 2:
            time.sleep(0.05)
        time.sleep(2)  # let them join and start their allreduces
        kids = children_by_rank(pod.pid)
        assert sorted(kids) == [0, 1], kids
        os.kill(signal_to(pod.pid, kids), signum)
        code = pod.wait(timeout=40)
    finally:
        if pod.poll() is None:
            os.kill(pod.pid, signal.SIGKILL)
            pod.wait()
    log.seek(0)
    return code, log.read().decode(errors="replace"), kids


def test_sigkill_from_outside_tears_down_the_pods_other_process(tandem_bin_dir, tmp_path):
    code, output, kids = run_steady_pod(tandem_bin_dir, tmp_path, lambda pod, kids: kids[0],
                                        signal.SIGKILL)
    assert code == 128 + signal.SIGKILL, output
    assert (f"[launcher] job failed: rank 0 (pid {kids[0]}) killed by signal 9 (SIGKILL)"
            in output), output
    assert all(gone(k) for k in kids.values()), kids


def test_sigterm_to_spawn_local_ends_every_process(tandem_bin_dir, tmp_path):
    # What the kubelet sends when the pod is deleted.
    code, output, kids = run_steady_pod(tandem_bin_dir, tmp_path, lambda pod, kids: pod,
                                        signal.SIGTERM)
    assert code == 128 + signal.SIGTERM, output
    assert "[launcher] job interrupted by SIGTERM" in output, output
    assert all(gone(k) for k in kids.values()), kids
