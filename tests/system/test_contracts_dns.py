"""A peer's DNS name that appears late, as a Kubernetes pod's does once the
pod is ready (docs/contracts.md, "Names and addresses"): three pods of an
Indexed Job on three hosts of a network-namespace bed (netbed.py) name
their coordinator "train-0.svc" from HOSTNAME and TANDEM_SUBDOMAIN; the
name resolves nowhere at first, every process retries with backoff, and
once the test adds it to the hosts' /etc/hosts the job forms and its
results are exact. A name that never appears fails after
TANDEM_CONNECT_TIMEOUT with an error naming the host and the contract.

Each host gets its own resolv.conf pointing at its own loopback, so no
lookup leaves the bed."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import threading
import time

NETNS_DIR = "/etc/netns"


def isolate_resolver(bed) -> None:
    for h in bed.hosts:
        with open(os.path.join(NETNS_DIR, h.netns, "resolv.conf"), "w", encoding="ascii") as f:
            f.write("nameserver 127.0.0.1\n")


def publish(bed, name: str, ip: str) -> None:
    """The name appears: as a DNS record would once the pod is ready."""
    for h in bed.hosts:
        with open(os.path.join(NETNS_DIR, h.netns, "hosts"), "a", encoding="ascii") as f:
            f.write(f"{ip}\t{name}\n")


def pod_env(rank: int, world: int, secret: str, **extra: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "JOB_COMPLETION_INDEX": str(rank), "WORLD_SIZE": str(world),
            "HOSTNAME": f"train-{rank}", "TANDEM_SUBDOMAIN": "svc", "MASTER_PORT": "9400",
            "TANDEM_SECRET": secret, **extra}


def collect(procs) -> dict[int, str]:
    outputs: dict[int, str] = {}

    def read(i: int, p: subprocess.Popen) -> None:
        outputs[i] = p.communicate()[0]

    readers = [threading.Thread(target=read, args=(i, p)) for i, p in enumerate(procs)]
    for t in readers:
        t.start()
    for t in readers:
        t.join(timeout=90)
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    return outputs


def test_a_coordinator_name_that_appears_late_is_waited_for(netbed, tandem_bin_dir):
    bed = netbed(3)
    isolate_resolver(bed)
    secret = secrets.token_hex(16)
    world = 3
    procs = [bed.popen(r + 1, [str(tandem_bin_dir / "collective_check"), "--steady", "3"],
                       env=pod_env(r, world, secret, TANDEM_CONNECT_TIMEOUT="60"),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    time.sleep(2.0)  # every process is retrying by now
    publish(bed, "train-0.svc", bed.host(1).ip)
    outputs = collect(procs)
    report = "\n".join(f"--- rank {i} (exit {p.returncode}):\n{outputs.get(i, '')}"
                       for i, p in enumerate(procs))
    for r, p in enumerate(procs):
        assert p.returncode == 0, report
        assert f"collective_check: ok rank={r} size={world} checks=3" in outputs[r], report
        assert "waiting for host name 'train-0.svc' to resolve" in outputs[r], report
        assert "start-up contract: indexed-job: rank" in outputs[r], report
    # Each announced its own bed address, found by the route to the coordinator.
    for r in range(world):
        m = re.search(r"announcing address (\S+) \(the route to the scheduler", outputs[r])
        assert m is None or m.group(1) == bed.host(r + 1).ip, report


def test_a_name_that_never_appears_fails_naming_it(netbed, tandem_bin_dir):
    bed = netbed(1)
    isolate_resolver(bed)
    started = time.monotonic()
    result = bed.run(1, [str(tandem_bin_dir / "collective_check")],
                     env=pod_env(1, 2, "s", TANDEM_CONNECT_TIMEOUT="2"), check=False, timeout=60)
    elapsed = time.monotonic() - started
    assert result.returncode != 0
    text = result.stdout + result.stderr
    assert "waited 2000 ms (TANDEM_CONNECT_TIMEOUT) for the scheduler's host 'train-0.svc'" in text, \
        text
    assert "indexed-job: rank 1 of 2" in text, text
    assert "could not resolve host 'train-0.svc'" in text, text
    assert 1.5 < elapsed < 30, elapsed
