"""The foundation's cluster across three hosts: network namespaces joined by a
bridge (netbed.py). Each process is started inside its host with the plain
DMLC environment, the way a cluster manager would start it: scheduler
addressed by host name, no DMLC_NODE_HOST (every node must find its own
address from the route to the scheduler), ranks left to the scheduler."""

from __future__ import annotations

import re
import secrets
import subprocess
import threading

DONE = re.compile(r"cluster_check: done role=(\w+) rank=(\d+) workers=(\d+) servers=(\d+) "
                  r"barriers=(\d+) table=(\w+)")
ANNOUNCE = re.compile(r"announcing address (\S+) \(the route to the scheduler")


def test_seven_nodes_across_three_hosts(netbed, tandem_bin_dir):
    bed = netbed(3)
    port = 9123
    secret = secrets.token_hex(16)
    # (host, role): the scheduler's host also runs a worker; each server shares
    # its host with workers.
    placement = [(1, "scheduler"), (1, "worker"), (2, "server"), (2, "worker"), (2, "worker"),
                 (3, "server"), (3, "worker")]
    procs = []
    for host, role in placement:
        env = {
            "PATH": "/usr/bin:/bin",
            "DMLC_ROLE": role,
            "DMLC_PS_ROOT_URI": bed.host(1).name,
            "DMLC_PS_ROOT_PORT": str(port),
            "DMLC_NUM_SERVER": "2",
            "DMLC_NUM_WORKER": "4",
            "TANDEM_SECRET": secret,
            "PS_VERBOSE": "1",
            "PS_HEARTBEAT_INTERVAL": "0.5",
            "PS_HEARTBEAT_TIMEOUT": "5",
            "TANDEM_START_TIMEOUT": "60",
        }
        p = bed.popen(host, [str(tandem_bin_dir / "cluster_check"), "--barriers", "30"], env=env,
                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs.append((host, role, p))

    outputs: dict[int, str] = {}

    def collect(i: int, p: subprocess.Popen) -> None:
        outputs[i] = p.communicate()[0]

    readers = [threading.Thread(target=collect, args=(i, p)) for i, (_, _, p) in enumerate(procs)]
    for t in readers:
        t.start()
    for t in readers:
        t.join(timeout=120)
    for _, _, p in procs:
        if p.poll() is None:
            p.kill()
    report = "\n".join(f"--- h{h} {r} (exit {p.returncode}):\n{outputs.get(i, '')}"
                       for i, (h, r, p) in enumerate(procs))
    assert all(p.returncode == 0 for _, _, p in procs), report

    ranks: dict[str, list[int]] = {}
    tables = set()
    for i, (host, role, _) in enumerate(procs):
        m = DONE.search(outputs[i])
        assert m, report
        assert m.group(1) == role
        ranks.setdefault(role, []).append(int(m.group(2)))
        tables.add(m.group(6))
        if role != "scheduler":
            # Each node announced its own host's address, found from the route.
            a = ANNOUNCE.search(outputs[i])
            assert a and a.group(1) == bed.host(host).ip, report
    assert sorted(ranks["worker"]) == [0, 1, 2, 3], report
    assert sorted(ranks["server"]) == [0, 1], report
    assert len(tables) == 1, report
