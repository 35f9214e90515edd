"""`tandem launch --launcher ssh` across three hosts in network namespaces,
each running Debian's sshd with keys this test generates. The launcher runs
on host h1 (the bed is not reachable from outside), the hostfile names the
hosts by name, and the job's processes run on their hosts under
`tandem remote-exec`. Checked: the job forms with dense ranks and completes;
kill -9 of a remote worker fails the job naming it and leaves nothing on any
host; kill -9 of the launcher itself stops every remote process within
seconds; a host that cannot be reached is diagnosed before anything starts;
with --max-restarts a killed remote worker restarts the job on every host."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

import netbed as netbed_module

DONE = re.compile(r"\[(scheduler|server \d+|worker \d+)\] cluster_check: done role=(\w+) "
                  r"rank=(\d+) workers=(\d+) servers=(\d+)")
PID = re.compile(r"\[(scheduler|server \d+|worker \d+)\] cluster_check: pid=(\d+)")
FORMED = re.compile(r"scheduler: all \d+ nodes registered")


class SshBed:
    """A 3-host bed with sshd on every host and a client key for root."""

    def __init__(self, bed: netbed_module.NetBed, workdir: Path):
        self.bed = bed
        self.dir = workdir
        self.key = workdir / "client_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key)],
                       check=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                        str(workdir / "host_key")], check=True)
        shutil.copy(str(self.key) + ".pub", workdir / "authorized_keys")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        self.sshd = []
        for h in bed.hosts:
            cfg = workdir / f"sshd_{h.name}.conf"
            cfg.write_text("\n".join([
                f"ListenAddress {h.ip}", "Port 22", f"HostKey {workdir / 'host_key'}",
                "PidFile none", f"AuthorizedKeysFile {workdir / 'authorized_keys'}",
                "PermitRootLogin prohibit-password", "PasswordAuthentication no",
                "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
                "LogLevel ERROR", "UseDNS no", ""]))
            self.sshd.append(bed.popen(h, ["/usr/sbin/sshd", "-D", "-e", "-f", str(cfg)],
                                       stderr=subprocess.DEVNULL))
        self.wait_for_sshd()

    def ssh_args(self) -> list[str]:
        opts = ["-i", str(self.key), "-o", "StrictHostKeyChecking=no", "-o",
                "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5",
                "-o", "GSSAPIAuthentication=no"]
        return [f"--ssh-arg={o}" for o in opts]

    def wait_for_sshd(self) -> None:
        deadline = time.monotonic() + 20
        for h in self.bed.hosts:
            while True:
                r = self.bed.run(1, ["ssh", *[a.split("=", 1)[1] for a in self.ssh_args()],
                                     h.name, "true"], check=False, timeout=15)
                if r.returncode == 0:
                    break
                if time.monotonic() > deadline:
                    pytest.fail(f"sshd on {h.name} did not answer: {r.stderr}")
                time.sleep(0.2)

    def job_pids(self) -> dict[str, list[int]]:
        """PIDs in each host's namespace other than its sshd listener."""
        listeners = {p.pid for p in self.sshd}
        out = {}
        for h in self.bed.hosts:
            pids = []
            for pid in netbed_module.namespace_pids(h.netns):
                try:
                    comm = Path(f"/proc/{pid}/comm").read_text().strip()
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                except OSError:
                    continue
                if pid in listeners or b"sshd -D -e" in cmdline or comm in ("unshare", "sh"):
                    continue
                pids.append(pid)
            out[h.name] = pids
        return out


@pytest.fixture(scope="module")
def sshbed(tmp_path_factory):
    """One bed with sshd for the whole file (building it costs seconds)."""
    if shutil.which("/usr/sbin/sshd") is None:
        pytest.skip("openssh-server is not installed (scripts/install-deps.sh installs it)")
    bed = netbed_module.NetBed(3)
    try:
        bed.create()
    except netbed_module.BedUnavailable as e:
        pytest.skip(f"multi-host bed unavailable: {e}")
    try:
        yield SshBed(bed, tmp_path_factory.mktemp("ssh"))
    finally:
        bed.destroy()


def start_launch(sb: SshBed, tandem_bin_dir: Path, hostfile: str, extra: list[str],
                 program: list[str], env: dict | None = None) -> tuple[subprocess.Popen, list[str]]:
    (sb.dir / "hosts").write_text(hostfile)
    argv = [str(tandem_bin_dir / "tandem"), "launch", "--launcher", "ssh", "-H",
            str(sb.dir / "hosts"), *sb.ssh_args(), *extra, "--", *program]
    base = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(sb.dir),
            "PS_HEARTBEAT_INTERVAL": "0.5", "PS_HEARTBEAT_TIMEOUT": "4"}
    base.update(env or {})
    proc = sb.bed.popen(1, argv, env=base, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True, cwd=str(sb.dir))
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    return proc, lines


def wait_for(lines: list[str], pattern: re.Pattern, count: int, timeout: float) -> list[re.Match]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [m for m in (pattern.search(l) for l in list(lines)) if m]
        if len(found) >= count:
            return found
        time.sleep(0.1)
    pytest.fail(f"expected {count} lines like {pattern.pattern}; output:\n{''.join(lines)}")


def assert_nothing_left(sb: SshBed, within: float) -> None:
    deadline = time.monotonic() + within
    while True:
        left = sb.job_pids()
        if not any(left.values()):
            return
        if time.monotonic() > deadline:
            details = {h: [Path(f"/proc/{p}/cmdline").read_bytes() for p in pids
                           if Path(f"/proc/{p}").exists()] for h, pids in left.items()}
            pytest.fail(f"processes left on the hosts: {details}")
        time.sleep(0.2)


HOSTFILE = "# the bed\nh1\nh2:2   # two slots\nh3 slots=2\n"


def test_a_job_across_three_hosts_completes(sshbed, tandem_bin_dir):
    proc, lines = start_launch(sshbed, tandem_bin_dir, HOSTFILE, ["-n", "4", "-s", "2"],
                               [str(tandem_bin_dir / "cluster_check"), "--serve-roles",
                                "--barriers", "30"])
    assert proc.wait(timeout=120) == 0, "".join(lines)
    time.sleep(0.2)
    found = [m.groups() for m in (DONE.search(l) for l in lines) if m]
    workers = sorted(int(r) for label, role, r, nw, ns in found if role == "worker")
    assert workers == [0, 1, 2, 3], "".join(lines)
    # The built-in servers and scheduler ran on their hosts and ended with the job.
    out = "".join(lines)
    for label in ("server 0", "server 1", "scheduler"):
        assert re.search(rf"\[launcher\] {label} on h\d \(pid \d+\) exited with status 0", out), out
    assert "every node left; the job is complete" in out, out
    for label, role, rank, nw, ns in found:
        assert (nw, ns) == ("4", "2")
        assert label == f"{role} {rank}"
    assert_nothing_left(sshbed, within=5)


def test_kill_9_of_a_remote_worker_fails_the_job_and_leaves_nothing(sshbed, tandem_bin_dir):
    proc, lines = start_launch(sshbed, tandem_bin_dir, HOSTFILE,
                               ["-n", "4", "-s", "1", "--command-runs-all-roles",
                                "--teardown-grace", "8"],
                               [str(tandem_bin_dir / "cluster_check"), "--barriers", "1000000",
                                "--sleep-ms", "5"])
    pids = {m.group(1): int(m.group(2)) for m in wait_for(lines, PID, 6, 60)}
    # Kill only once the job has formed: a node lost before that is waited
    # for (a replacement may still register), not reported as lost.
    wait_for(lines, FORMED, 1, 60)
    time.sleep(0.5)
    os.kill(pids["worker 3"], signal.SIGKILL)
    code = proc.wait(timeout=40)
    out = "".join(lines)
    assert code != 0, out
    assert re.search(r"lost worker 3 \(node \d+", out), out
    # The launcher's last line names the first failure it saw, with its host
    # (over ssh that may be a survivor's PeerLost exit rather than the kill,
    # whose report travels back through the victim's ssh connection).
    assert re.search(r"\[launcher\] job failed: (scheduler|server \d+|worker \d+) on h\d "
                     r"\(pid \d+\) exited with status \d+", out), out
    assert re.search(r"\[launcher\] worker 3 on h\d \(pid \d+\) exited with status 137", out), out
    assert_nothing_left(sshbed, within=10)


def test_kill_9_of_the_launcher_stops_every_remote_process(sshbed, tandem_bin_dir):
    proc, lines = start_launch(sshbed, tandem_bin_dir, HOSTFILE,
                               ["-n", "3", "-s", "1", "--command-runs-all-roles"],
                               [str(tandem_bin_dir / "cluster_check"), "--barriers", "1000000",
                                "--sleep-ms", "5"])
    wait_for(lines, PID, 5, 60)
    assert sum(len(p) for p in sshbed.job_pids().values()) >= 5
    killed = time.monotonic()
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its ssh clients, as a crash would
    proc.wait(timeout=10)
    assert_nothing_left(sshbed, within=10)
    assert time.monotonic() - killed < 12


def test_an_unreachable_host_is_diagnosed_before_anything_starts(sshbed, tandem_bin_dir):
    proc, lines = start_launch(sshbed, tandem_bin_dir, "h1\nnosuchhost\n", ["-n", "2", "-s", "0"],
                               [str(tandem_bin_dir / "cluster_check")])
    code = proc.wait(timeout=60)
    out = "".join(lines)
    assert code != 0, out
    assert "nosuchhost: ssh failed" in out, out
    assert "h1:" not in out.split("before the job started:")[-1], out
    assert not PID.search(out), out


def test_max_restarts_restarts_every_process_on_every_host(sshbed, tandem_bin_dir):
    from test_launch_restart import LABELS, attempt_alive, starts
    proc, lines = start_launch(
        sshbed, tandem_bin_dir, HOSTFILE,
        ["-n", "2", "-s", "1", "--command-runs-all-roles", "--teardown-grace", "4",
         "--max-restarts", "2", "--restart-delay", "0.2"],
        [str(tandem_bin_dir / "restart_check"), "--fail-rank", "1", "--fail-until", "1"])
    code = proc.wait(timeout=90)
    time.sleep(0.2)  # the reader thread takes the last lines
    out = "".join(lines)
    assert code == 0, out
    first, second = starts(out, 0), starts(out, 1)
    assert set(first) == LABELS and set(second) == LABELS, out
    # TANDEM_RESTART_COUNT and TANDEM_MAX_RESTARTS reached every host.
    assert {p["max"] for p in (*first.values(), *second.values())} == {"2"}, out
    # The killed worker is the cause, whatever order the hosts' reports came in.
    assert re.search(r"\[launcher\] restarting the job \(restart 1 of 2\) after worker 1 on "
                     r"h\d \(pid \d+\) exited with status 137;", out), out
    assert out.count("[launcher] restarting the job") == 1, out
    assert "[launcher] job succeeded after 1 restart" in out, out
    survivors = [label for label, p in first.items() if attempt_alive(p["pid"], 0)]
    assert not survivors, f"{survivors} of the first attempt still run\n{out}"
    assert_nothing_left(sshbed, within=10)
