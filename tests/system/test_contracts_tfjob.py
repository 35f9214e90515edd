"""A TFJob's pods as the Kubeflow operator starts them (docs/contracts.md,
"TFJob"): one host of a network-namespace bed per pod, each given the
TF_CONFIG the operator writes (every task's Service name with the port of
the container port tfjob-port, and the pod's own task), the names resolved
through each host's own hosts file (as a cluster's DNS would resolve the
Services; no lookup leaves the bed). A collectives job (chief and two
workers) gives collective_check's exact results; a parameter-server job
(chief, two workers, two ps tasks running `tandem server`, as `tandem k8s
render --kind tfjob` renders it) gives kvstore_check's closed-form sums.
Every pod logs the tfjob contract; the chief hosts the rendezvous."""

from __future__ import annotations

import json
import os
import secrets
import subprocess

from test_contracts_dns import collect, isolate_resolver
from test_contracts_start import check_kvstore

NETNS_DIR = "/etc/netns"
PORT = 2222


def service(job: str, task: str, index: int) -> str:
    return f"{job}-{task}-{index}.training.svc"


def tf_config(job: str, tasks: dict[str, int], task: str, index: int) -> str:
    cluster = {t: [f"{service(job, t, i)}:{PORT}" for i in range(n)] for t, n in tasks.items()}
    return json.dumps({"cluster": cluster, "task": {"type": task, "index": index},
                       "environment": "cloud"})


def start_pods(bed, tandem_bin_dir, job: str, tasks: dict[str, int], argv_of) -> list:
    """One pod per host, in the order chief, worker, ps; returns (task, Popen)."""
    isolate_resolver(bed)
    pods = [(t, i) for t, n in tasks.items() for i in range(n)]
    for h in bed.hosts:
        with open(os.path.join(NETNS_DIR, h.netns, "hosts"), "a", encoding="ascii") as f:
            for k, (t, i) in enumerate(pods):
                f.write(f"{bed.host(k + 1).ip}\t{service(job, t, i)}\n")
    secret = secrets.token_hex(16)
    procs = []
    for k, (t, i) in enumerate(pods):
        env = {"PATH": "/usr/bin:/bin", "TF_CONFIG": tf_config(job, tasks, t, i),
               "TANDEM_SECRET": secret, "HOSTNAME": f"{job}-{t}-{i}",
               "TANDEM_CONNECT_TIMEOUT": "60"}
        procs.append((t, bed.popen(k + 1, argv_of(t), env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)))
    return procs


def report(procs, outputs) -> str:
    return "\n".join(f"--- {t} pod {k} (exit {p.returncode}):\n{outputs.get(k, '')}"
                     for k, (t, p) in enumerate(procs))


def test_collectives_job_of_a_chief_and_two_workers(netbed, tandem_bin_dir):
    tasks = {"chief": 1, "worker": 2}
    bed = netbed(3)
    procs = start_pods(bed, tandem_bin_dir, "tj", tasks,
                       lambda t: [str(tandem_bin_dir / "collective_check"), "--steady", "3"])
    outputs = collect([p for _, p in procs])
    text = report(procs, outputs)
    for k, (_, p) in enumerate(procs):
        assert p.returncode == 0, text
        # The chief is rank 0, the workers follow in task order.
        assert f"collective_check: ok rank={k} size=3 checks=3" in outputs[k], text
        assert f"start-up contract: tfjob: rank {k} of 3" in outputs[k], text
        assert f"coordinator {service('tj', 'chief', 0)}:{PORT}" in outputs[k], text
    assert "worker 0 hosts the rendezvous in-process" in outputs[0], text


def test_parameter_server_job_with_two_ps_tasks(netbed, tandem_bin_dir):
    tasks = {"chief": 1, "worker": 2, "ps": 2}
    bed = netbed(5)

    def argv_of(task: str) -> list[str]:
        if task == "ps":
            return [str(tandem_bin_dir / "tandem"), "server"]
        return [str(tandem_bin_dir / "kvstore_check"), "--scenario", "sync"]

    procs = start_pods(bed, tandem_bin_dir, "tjps", tasks, argv_of)
    outputs = collect([p for _, p in procs])
    text = report(procs, outputs)
    for _, p in procs:
        assert p.returncode == 0, text
    check_kvstore([outputs[k] for k in range(5)], 3, 2, "tfjob")
    # ps task i is server i, the last ranks.
    for i in range(2):
        out = outputs[3 + i]
        assert f"tfjob: rank {3 + i} of 5" in out and f"-> server {i} of 3 workers and 2 servers" \
            in out, text
