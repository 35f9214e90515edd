"""An elastic PyTorchJob as `tandem k8s render` writes it (min_workers below
workers: docs/deploy.md, "An elastic PyTorchJob"), its pods run as
processes on this machine: each pod's environment is its rendered
container's variables plus what the training operator adds to an elastic
PyTorchJob's pods (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE over every
replica, PET_NNODES=MIN:MAX, PET_RDZV_ENDPOINT, PET_RDZV_BACKEND,
PET_MAX_RESTARTS, PET_NPROC_PER_NODE), with the pods' names and IPs
replaced by 127.0.0.1 (no cluster DNS here) and the containers' commands by
tests/programs/elastic_train.

Worker pod 2 SIGKILLs itself at step 4 (exit 137, which the operator's
ExitCode policy retries); the test then starts the same pod again, with the
same command and environment, as the operator does. The survivors train on
without it, the new process joins at their next commit, and all three end
with the weights of the replay (relative 1e-12). The Master (the scheduler)
exits 0 once every worker has finished, which is what marks the PyTorchJob
Succeeded. Nothing is left running."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import yaml

from conftest import free_port
from test_contracts_start import clean_env
from test_elastic_collectives import _replay, _weights

STEPS, DIM = 12, 24


def render_elastic(tandem_bin_dir: Path, tmp_path: Path) -> dict:
    description = tmp_path / "job.json"
    description.write_text(json.dumps({
        "name": "el", "namespace": "ns", "image": "tandem:test", "command": ["./train"],
        "workers": 3, "min_workers": 2, "backoff_limit": 4}))
    result = subprocess.run([str(tandem_bin_dir / "tandem"), "k8s", "render", "-f",
                             str(description), "--kind", "pytorchjob"],
                            capture_output=True, text=True, timeout=30, check=True)
    return [o for o in yaml.safe_load_all(result.stdout) if o][-1]


def pod_env(container: dict, operator: dict[str, str], port: int) -> dict[str, str]:
    """The container's variables as the kubelet resolves them (the Secret
    here is the tests' job secret, the pod's IP loopback), the scheduler's
    Service name loopback, the operator's variables over them."""
    env = clean_env()
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
        elif "fieldRef" in var["valueFrom"]:
            env[var["name"]] = "127.0.0.1"  # status.podIP
        # secretKeyRef: clean_env() holds the job's TANDEM_SECRET already
    env["DMLC_PS_ROOT_URI"] = "127.0.0.1"
    env["DMLC_PS_ROOT_PORT"] = str(port)
    env.update(operator)
    return env


def test_a_restarted_worker_pod_joins_the_running_job(launch, tandem_bin_dir, tmp_path):
    job = render_elastic(tandem_bin_dir, tmp_path)
    policy = job["spec"]["elasticPolicy"]
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert policy == {"minReplicas": 2, "maxReplicas": 3, "maxRestarts": 4}
    port = free_port()
    world = sum(r["replicas"] for r in replicas.values())
    assert world == 4  # the operator's WORLD_SIZE counts the Master

    def operator_env(rank: int) -> dict[str, str]:
        return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                "WORLD_SIZE": str(world), "PYTHONUNBUFFERED": "0",
                "PET_NNODES": f"{policy['minReplicas']}:{policy['maxReplicas']}",
                "PET_RDZV_ENDPOINT": f"127.0.0.1:{port}", "PET_RDZV_BACKEND": "c10d",
                "PET_MAX_RESTARTS": str(policy["maxRestarts"]), "PET_NPROC_PER_NODE": "1"}

    (master,) = replicas["Master"]["template"]["spec"]["containers"]
    (worker,) = replicas["Worker"]["template"]["spec"]["containers"]
    assert master["command"] == ["tandem", "scheduler"]
    scheduler = launch.start_command([str(tandem_bin_dir / "tandem"), "scheduler"],
                                     env=pod_env(master, operator_env(0), port))
    train = [str(tandem_bin_dir / "elastic_train"), "--steps", str(STEPS), "--dim", str(DIM),
             "--leave", "2:4", "--wait-join-at", "7"]
    envs = [pod_env(worker, operator_env(1 + i), port) for i in range(3)]
    pods = [launch.start_command(train, env=env) for env in envs]
    # The scheduler numbers the workers as they register: whichever pod is
    # worker 2 leaves.
    deadline = time.monotonic() + 60
    while all(p.proc.poll() is None for p in pods):
        assert time.monotonic() < deadline, "\n".join(p.describe() for p in pods)
        time.sleep(0.05)
    (gone,) = [i for i, p in enumerate(pods) if p.proc.poll() is not None]
    assert pods[gone].wait(timeout=5) == -9, pods[gone].describe()  # SIGKILL: retryable
    assert "elastic_train: worker 2 leaves at step 4" in pods[gone].output, pods[gone].output
    # The operator starts that pod again: the same command, the same environment.
    again = launch.start_command(train, env=envs[gone])
    survivors = [p for i, p in enumerate(pods) if i != gone]

    for p in survivors + [again]:
        assert p.wait(timeout=120) == 0, p.describe()
    assert scheduler.wait(timeout=30) == 0, scheduler.describe()
    for p in [scheduler, again] + pods:
        p.assert_no_leftovers()

    contract = r"start-up contract: dmlc: worker \(scheduler 127\.0\.0\.1:\d+, 0 servers, " \
               r"3 workers\) \[also present, ignored: torchrun, trainjob\]"
    for p in pods + [again]:
        assert re.search(contract, p.output), p.output
    assert "joined the running job" in again.output, again.output
    # The new process takes the departed worker's place, 2.
    start = re.search(r"elastic_train: worker 2 trains from step (\d+) rank 2 size 3",
                      again.output)
    assert start, again.output
    joined_from = int(start.group(1))
    assert 4 <= joined_from <= 7, again.output
    expected = _replay(3, STEPS, DIM, {2: 4}, {2: joined_from})
    finals = {2: _weights(again.output, 2, 2, 3, STEPS, 0)}
    for p in survivors:
        done = re.search(r"elastic_train: worker (\d) done rank (\d) size 3 step "
                         rf"{STEPS} resets (\d) weights", p.output)
        assert done, p.output
        w, rank, resets = (int(x) for x in done.groups())
        finals[w] = _weights(p.output, w, rank, 3, STEPS, resets)
    assert sorted(finals) == [0, 1, 2], finals.keys()
    for w, got in finals.items():
        assert len(got) == DIM, got
        for i, (g, e) in enumerate(zip(got, expected)):
            assert abs(g - e) <= 1e-12 * max(1.0, abs(e)), (w, i, g, e)
