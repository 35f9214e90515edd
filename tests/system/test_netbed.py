"""Self-test of the multi-host bed (netbed.py): hosts reach each other by
address and by name, shaping and loss act, and nothing of a bed outlives it
however its owner ends."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import netbed

PYTHON = "/usr/bin/python3"
PORT = 7700

# Serves on every address (IPv4 and IPv6) of its host: echoes each connection's
# bytes back, or with "sink" answers with the number of bytes received.
SERVER = textwrap.dedent("""
    import socket, sys, threading
    mode = sys.argv[1]
    srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    srv.bind(("::", int(sys.argv[2])))
    srv.listen(16)
    print("listening", flush=True)
    def serve(conn):
        with conn:
            total, chunks = 0, []
            while True:
                data = conn.recv(1 << 16)
                if not data:
                    break
                total += len(data)
                if mode == "echo":
                    chunks.append(data)
            conn.sendall(b"".join(chunks) if mode == "echo" else str(total).encode())
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()
""")

# Connects (retrying while the server starts), sends N bytes, half-closes, and
# prints the sha256 of the answer, its length and the seconds from connect to
# the end of the answer.
CLIENT = textwrap.dedent("""
    import hashlib, socket, sys, time
    host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    payload = bytes(i % 251 for i in range(n))
    deadline = time.monotonic() + 15
    while True:
        try:
            s = socket.create_connection((host, port), timeout=30)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    start = time.monotonic()
    s.sendall(payload)
    s.shutdown(socket.SHUT_WR)
    answer = b""
    while True:
        data = s.recv(1 << 16)
        if not data:
            break
        answer += data
    took = time.monotonic() - start
    print(hashlib.sha256(answer).hexdigest(), len(answer), hashlib.sha256(payload).hexdigest(),
          f"{took:.4f}")
""")


def start_server(bed: netbed.NetBed, host, mode: str = "echo") -> subprocess.Popen:
    proc = bed.popen(host, [PYTHON, "-c", SERVER, mode, str(PORT)], stdout=subprocess.PIPE,
                     text=True)
    assert proc.stdout.readline().strip() == "listening"
    return proc


def transfer(bed: netbed.NetBed, client, server_address: str, nbytes: int):
    """Returns (answer sha, answer length, payload sha, seconds) of one client run."""
    out = bed.run(client, [PYTHON, "-c", CLIENT, server_address, str(PORT), str(nbytes)],
                  timeout=120).stdout.split()
    return out[0], int(out[1]), out[2], float(out[3])


def bed_namespaces(bed_id: str) -> list[str]:
    return [n for n in netbed.list_namespaces() if n.startswith(bed_id + "-")]


def require_namespaces() -> None:
    reason = netbed.probe()
    if reason is not None:
        pytest.skip(f"multi-host bed unavailable: {reason}")


def test_three_hosts_reach_each_other_by_address_and_name(netbed):
    bed = netbed(3)
    assert len(bed_namespaces(bed.bed_id)) == 4  # three hosts and the bridge
    for h in bed.hosts:
        assert bed.run(h, ["hostname"]).stdout.strip() == h.name
        start_server(bed, h)
    for client in bed.hosts:
        for server in bed.hosts:
            if server is client:
                continue
            for address in (server.ip, server.name, server.ip6):
                got, length, sent, _ = transfer(bed, client, address, 100_000)
                assert (got, length) == (sent, 100_000), \
                    f"{client.name} -> {server.name} at {address}"


def test_hosts_see_only_their_own_interfaces(netbed):
    bed = netbed(2)
    # No interface of the machine's own namespace leads into the bed (a veth
    # shows its peer's namespace as "link-netns NAME")...
    machine_links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True,
                                   text=True).stdout
    assert bed.bed_id not in machine_links
    # ...and a host sees only its own loopback and eth0.
    links = bed.run(1, ["ip", "-o", "link", "show"]).stdout
    names = sorted(line.split(":")[1].strip().split("@")[0] for line in links.splitlines())
    assert names == ["eth0", "lo"]


def test_rate_shaping_limits_throughput(netbed):
    bed = netbed(2, rate="50mbit")
    assert "tbf" in bed.qdisc(1) and "50Mbit" in bed.qdisc(1)
    offloads = bed.run(1, ["ethtool", "-k", "eth0"]).stdout
    assert "tcp-segmentation-offload: off" in offloads
    start_server(bed, 1, mode="sink")
    nbytes = 4_000_000
    _, _, _, seconds = transfer(bed, 2, bed.hosts[0].ip, nbytes)
    mbit_per_s = nbytes * 8 / seconds / 1e6
    # Shaping can only slow a transfer down; allow for the 256 KiB burst.
    assert mbit_per_s < 50 * 1.3, f"{mbit_per_s:.1f} Mbit/s through a 50 Mbit/s link"


def test_loss_drops_packets_and_tcp_still_delivers(netbed):
    bed = netbed(2, loss_percent=5)
    start_server(bed, 1)
    got, length, sent, _ = transfer(bed, 2, bed.hosts[0].ip, 2_000_000)
    assert (got, length) == (sent, 2_000_000)
    assert bed.dropped_packets() > 0
    bed.set_loss(0)
    assert bed.dropped_packets() == 0


def test_cut_isolates_a_host_until_restored(netbed):
    bed = netbed(3)
    start_server(bed, 1)
    probe = [PYTHON, "-c", "import socket, sys; socket.create_connection((sys.argv[1], "
             f"{PORT}), timeout=1).close()", bed.hosts[0].ip]
    bed.cut(3)
    assert bed.cut_hosts() == ["h3"]
    assert bed.run(3, probe, check=False).returncode != 0  # h3 reaches nobody...
    got, length, sent, _ = transfer(bed, 2, bed.hosts[0].ip, 100_000)  # ...the others still
    assert (got, length) == (sent, 100_000)
    bed.restore(3)
    assert bed.cut_hosts() == []
    got, length, sent, _ = transfer(bed, 3, bed.hosts[0].ip, 100_000)
    assert (got, length) == (sent, 100_000)


def test_netbed_run_script_runs_a_job_across_hosts(tandem_bin_dir):
    """bench/netbed_run.py: a tandem job over a shaped, lossy bed from a script,
    with every process's output prefixed and the bed removed afterwards."""
    require_namespaces()
    script = Path(__file__).resolve().parents[2] / "bench" / "netbed_run.py"
    proc = subprocess.Popen(
        [PYTHON, str(script), "--hosts", "3", "--rate", "1gbit", "--loss", "1", "--job", "2,1",
         "--env", "PS_RESEND=1", "--timeout", "120", "--", str(tandem_bin_dir / "kv_rounds"),
         "--rounds", "10", "--report-every", "5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=netbed.kill_with_parent(signal.SIGTERM))
    try:
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert result.returncode == 0, result.stdout + result.stderr
    for rank in (0, 1):
        assert re.search(rf"^\[h\d worker {rank}\] kv_rounds: done rank={rank} rounds=10 "
                         r"workers=2 servers=1", result.stdout, re.M), result.stdout
    assert "[h1 scheduler]" in result.stdout and "frames dropped" in result.stderr
    # The script's bed (named with its PID) is gone.
    assert not [n for n in netbed.list_namespaces() if f"-{proc.pid}-" in n]


def test_teardown_after_an_exception_removes_everything():
    require_namespaces()
    with pytest.raises(RuntimeError, match="boom"):
        with netbed.NetBed(3) as bed:
            sleeper = bed.popen(2, ["sleep", "600"])
            assert bed_namespaces(bed.bed_id)
            raise RuntimeError("boom")
    assert sleeper.poll() is not None
    assert bed_namespaces(bed.bed_id) == []
    assert not any(os.path.exists(f"/etc/netns/{h.netns}") for h in bed.hosts)


# Runs in a child process: builds a bed, starts a long sleep in it, reports the
# bed's id and the sleeper's PID, then waits to be killed.
OWNER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[1])
    import netbed
    bed = netbed.NetBed(2, prefix=sys.argv[2]).create()
    sleeper = bed.popen(1, ["sleep", "600"])
    print(bed.bed_id, sleeper.pid, flush=True)
    time.sleep(600)
""")


def start_owner(prefix: str) -> tuple[subprocess.Popen, str, int]:
    owner = subprocess.Popen([PYTHON, "-c", OWNER, os.path.dirname(netbed.__file__), prefix],
                             stdout=subprocess.PIPE, text=True)
    line = owner.stdout.readline().split()
    assert len(line) == 2, f"bed owner failed (exit {owner.poll()})"
    return owner, line[0], int(line[1])


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not os.path.exists(f"/proc/{pid}") or \
                open(f"/proc/{pid}/stat").read().split(") ")[1][0] in "ZX":
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_owner_stopped_by_signal_removes_its_bed(sig):
    require_namespaces()
    owner, bed_id, sleeper = start_owner(f"tdmsig{os.getpid()}")
    try:
        assert len(bed_namespaces(bed_id)) == 3
        owner.send_signal(sig)
        owner.wait(timeout=30)
        assert bed_namespaces(bed_id) == []
        assert wait_gone(sleeper)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        netbed.sweep_stale(f"tdmsig{os.getpid()}")


def test_bed_of_a_killed_owner_is_swept_by_the_next_bed():
    require_namespaces()
    prefix = f"tdmkill{os.getpid()}"
    owner, bed_id, sleeper = start_owner(prefix)
    owner.kill()  # SIGKILL: no clean-up code runs in the owner
    owner.wait(timeout=30)
    # The kernel kills the owner's children with it (PR_SET_PDEATHSIG)...
    assert wait_gone(sleeper)
    # ...but the namespaces stay until someone removes them.
    assert len(bed_namespaces(bed_id)) == 3
    with netbed.NetBed(1, prefix=prefix) as bed:
        assert bed_namespaces(bed_id) == []
        assert len(bed_namespaces(bed.bed_id)) == 2
    assert bed_namespaces(bed.bed_id) == []


def test_zz_no_namespace_of_this_run_is_left():
    # Runs last in this file: every bed above, fixture-made or not, is gone.
    mine = f"{netbed.DEFAULT_PREFIX}-{os.getpid()}-"
    assert [n for n in netbed.list_namespaces() if n.startswith(mine)] == []


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
