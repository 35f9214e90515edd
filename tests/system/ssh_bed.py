"""A bed of three network-namespace hosts (netbed.py) each running Debian's
sshd with keys the test generates, for the launchers that reach other
hosts over ssh: `tandem launch --launcher ssh` (test_launch_ssh.py) and
Open MPI's mpirun (test_launch_mpi_hosts.py). The launcher runs on h1 (the
bed is not reachable from outside); processes left on a host are found by
the PIDs inside its namespace, never by name.

Test modules import the module-scoped fixture `sshbed` (an SshBed) and the
helpers start_launch, wait_for and assert_nothing_left."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

import netbed as netbed_module


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

    def mpi_args(self) -> list[str]:
        """mpirun's options for the bed: its rsh agent is ssh with the bed's
        key, and its daemons talk over the bridge (eth0), not loopback."""
        agent = " ".join(["ssh", *[a.split("=", 1)[1] for a in self.ssh_args()]])
        opts = ["--mca", "plm_rsh_agent", agent, "--mca", "oob_tcp_if_include", "eth0",
                "--mca", "btl_tcp_if_include", "eth0"]
        return [f"--mpi-arg={o}" for o in opts]

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


def start_launch(sb: SshBed, tandem_bin_dir: Path, hostfile: str | None, extra: list[str],
                 program: list[str], env: dict | None = None,
                 launcher: str = "ssh") -> tuple[subprocess.Popen, list[str]]:
    """Starts `tandem launch --launcher LAUNCHER -H <hostfile> EXTRA -- PROGRAM` on h1
    (with the bed's ssh options: --ssh-arg for ssh, mpirun's rsh agent for mpi);
    returns the launcher and the list its output lines are appended to. Without
    a hostfile (None) EXTRA says where the hosts come from."""
    hosts = []
    if hostfile is not None:
        (sb.dir / "hosts").write_text(hostfile)
        hosts = ["--hostfile", str(sb.dir / "hosts")]
    reach = sb.ssh_args() if launcher == "ssh" else sb.mpi_args()
    argv = [str(tandem_bin_dir / "tandem"), "launch", "--launcher", launcher, *hosts, *reach,
            *extra, "--", *program]
    base = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(sb.dir),
            "PS_HEARTBEAT_INTERVAL": "0.5", "PS_HEARTBEAT_TIMEOUT": "4"}
    base.update(env or {})
    proc = sb.bed.popen(1, argv, env=base, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True, cwd=str(sb.dir))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    proc.reader = reader  # wait_launch joins it
    return proc, lines


def wait_launch(proc: subprocess.Popen, timeout: float) -> int:
    """Waits for a launcher of start_launch and then for its output's end, so
    that the lines hold everything it wrote (its last lines can still be in
    the pipe when it exits); returns its exit code."""
    code = proc.wait(timeout=timeout)
    proc.reader.join(timeout=10)
    return code


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
