"""A multi-host test bed built from Linux network namespaces.

A bed is K hosts, each a network namespace with one interface `eth0`, joined
by veth pairs to a bridge that lives in a namespace of its own, so nothing of
the bed touches the machine's own network:

      h1 (10.77.X.1)    h2 (10.77.X.2)    h3 (10.77.X.3)
          eth0              eth0              eth0
           |                 |                 |
           p1 ------------- p2 -------------- p3      (bridge br0, own netns)

Every host has loopback up, an IPv4 address in a private /24 (10.77.X.0/24, X
random per bed) and an IPv6 address in fd77:X::/64, and an /etc/hosts (through
`ip netns exec`'s /etc/netns/ bind mount) that names every host of the bed, so
programs may address peers by name (`h2`) as they would on a cluster. A
command run on a host sees its own hostname (`unshare --uts`).

Options, as docs/netbed.md and ../shared/BENCHMARKING.md describe: `rate`
shapes both ends of every link with `tc tbf`; `offloads_off` turns off
tso/gso/gro so that shaping is honest; `loss_percent` drops packets at random
on the bridge with nftables. The kernel has no netem: delay cannot be
emulated.

Ownership and clean-up: a bed remembers every namespace it made and every
process it started. `destroy()` (also run by the context manager, an atexit
hook, and a SIGTERM that arrives while a bed exists) kills those processes by
process group, then every process still inside the bed's namespaces by PID,
then deletes the namespaces and their /etc/netns entries. Namespace names
carry the creating process's PID (`<prefix>-<pid>-<random>-h1`), so a bed
whose owner was killed with SIGKILL is removed by the next bed created with
the same prefix (or by `python3 netbed.py --cleanup`); beds of live processes
are never touched, so parallel runs do not collide.

Requires root (CAP_NET_ADMIN and CAP_SYS_ADMIN), iproute2, and for the
options ethtool and nftables. `NetBed.create()` raises BedUnavailable when
namespaces cannot be made here; tests turn that into a skip.
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import dataclasses
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Iterable, Mapping, Sequence

DEFAULT_PREFIX = "tdm"
_NETNS_DIR = "/run/netns"
_ETC_NETNS_DIR = "/etc/netns"
_PR_SET_PDEATHSIG = 1


class BedUnavailable(Exception):
    """Namespaces (or a tool an option needs) cannot be used on this machine."""


class BedError(Exception):
    """Setting up or tearing down a bed failed; the message has the command and its stderr."""


@dataclasses.dataclass(frozen=True)
class Host:
    """One host of a bed."""

    index: int  # 1-based
    name: str  # hostname and /etc/hosts name: h1, h2, ...
    netns: str  # the namespace's name, unique on the machine
    ip: str  # IPv4 address of eth0
    ip6: str  # IPv6 address of eth0
    ifname: str  # the interface inside the host: eth0
    bridge_port: str  # its peer inside the bridge namespace: p1, p2, ...


def _run(argv: Sequence[str], check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True,
                                text=True, timeout=timeout)
    except FileNotFoundError as e:
        raise BedError(f"{argv[0]} not found: {e}") from e
    except subprocess.TimeoutExpired as e:
        raise BedError(f"`{' '.join(argv)}` did not finish in {timeout} s") from e
    if check and result.returncode != 0:
        raise BedError(f"`{' '.join(argv)}` failed with exit code {result.returncode}: "
                       f"{result.stderr.strip()}")
    return result


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def list_namespaces() -> list[str]:
    """Names of every named network namespace on the machine."""
    try:
        return sorted(os.listdir(_NETNS_DIR))
    except FileNotFoundError:
        return []


def namespace_pids(netns: str) -> list[int]:
    """PIDs of every process whose network namespace is `netns`."""
    result = _run(["ip", "netns", "pids", netns], check=False)
    return [int(tok) for tok in result.stdout.split() if tok.isdigit()]


def _kill_namespace_processes(netns: str, deadline_s: float = 5.0) -> list[int]:
    """SIGKILLs every process inside `netns`; returns the PIDs that survived the deadline."""
    end = time.monotonic() + deadline_s
    while True:
        pids = [p for p in namespace_pids(netns) if p != os.getpid()]
        if not pids:
            return []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > end:
            return pids
        time.sleep(0.05)


def _remove_namespace(netns: str) -> None:
    survivors = _kill_namespace_processes(netns)
    if survivors:
        raise BedError(f"processes {survivors} in namespace {netns} survived SIGKILL")
    if netns in list_namespaces():
        _run(["ip", "netns", "del", netns])
    shutil.rmtree(os.path.join(_ETC_NETNS_DIR, netns), ignore_errors=True)


_STALE_RE = re.compile(r"^(?P<bed>(?P<prefix>.+)-(?P<pid>\d+)-[0-9a-f]+)-(?:h\d+|br)$")


def sweep_stale(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Removes the namespaces of beds with `prefix` whose creating process is dead.

    Returns the names removed. Beds of live processes are left alone.
    """
    removed = []
    for netns in list_namespaces():
        m = _STALE_RE.match(netns)
        if not m or m.group("prefix") != prefix or _pid_alive(int(m.group("pid"))):
            continue
        try:
            _remove_namespace(netns)
            removed.append(netns)
        except BedError as e:
            print(f"netbed: could not remove stale namespace {netns}: {e}", file=sys.stderr)
    return removed


def probe(prefix: str = DEFAULT_PREFIX) -> str | None:
    """Returns None when this process can create network namespaces, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN, CAP_SYS_ADMIN); running as uid " \
               f"{os.geteuid()}"
    if shutil.which("ip") is None:
        return "`ip` (iproute2) is not installed; scripts/install-deps.sh installs it"
    # Named like a bed's bridge, so that sweep_stale() removes it should we die here.
    name = f"{prefix}-{os.getpid()}-{secrets.token_hex(3)}-br"
    result = _run(["ip", "netns", "add", name], check=False)
    if result.returncode != 0:
        return f"cannot create a network namespace: {result.stderr.strip()}"
    _run(["ip", "netns", "del", name], check=False)
    return None


_libc = ctypes.CDLL(None, use_errno=True)


def kill_with_parent(sig: int = signal.SIGKILL):
    """A Popen preexec_fn: the kernel sends `sig` to the child when the thread
    that started it exits (so a test killed with SIGKILL leaves no orphan)."""
    parent = os.getpid()

    def preexec() -> None:
        _libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


# Beds that exist in this process, so the atexit hook and the SIGTERM handler can
# remove them.
_live_beds: set["NetBed"] = set()
_live_lock = threading.Lock()
_handlers_installed = False


def _destroy_all() -> None:
    with _live_lock:
        beds = list(_live_beds)
    for bed in beds:
        try:
            bed.destroy()
        except Exception as e:  # noqa: BLE001 - report every bed, then go on
            print(f"netbed: tear-down of {bed.bed_id} failed: {e}", file=sys.stderr)


def _on_sigterm(signum, frame):  # noqa: ARG001 - signal handler signature
    with _live_lock:
        any_bed = bool(_live_beds)
    if not any_bed:
        # Nothing to clean up: die of the signal as if we had never handled it.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    # Unwind like Ctrl-C so that context managers and pytest fixtures tear the
    # beds down; atexit is the backstop.
    raise KeyboardInterrupt(f"signal {signum}")


def _install_handlers() -> None:
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(_destroy_all)
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


class NetBed:
    """K hosts in network namespaces joined by a bridge.

    Use as a context manager (`with NetBed(3) as bed:`) or call create() and
    destroy(). Not thread-safe: one thread builds, uses and destroys a bed
    (destroy() may also run from the atexit hook).
    """

    def __init__(self, hosts: int = 3, *, prefix: str = DEFAULT_PREFIX, rate: str | None = None,
                 burst: str = "256kb", tbf_latency: str = "5ms", offloads_off: bool | None = None,
                 loss_percent: float | None = None, ipv6: bool = True):
        """
        hosts: number of hosts (1..200).
        prefix: start of every namespace name; letters, digits and '_' only.
        rate: a tc rate ("1gbit", "100mbit") for both ends of every link, or None.
        offloads_off: tso/gso/gro off on every veth; defaults to on when `rate` is set.
        loss_percent: drop this percentage of bridged packets at random (0.01 steps).
        ipv6: give every host an IPv6 address too.
        """
        if not 1 <= hosts <= 200:
            raise ValueError(f"a bed has 1..200 hosts, not {hosts}")
        if not re.fullmatch(r"[A-Za-z0-9_]+", prefix):
            raise ValueError(f"prefix {prefix!r} may hold only letters, digits and '_'")
        if loss_percent is not None and not 0 <= loss_percent <= 100:
            raise ValueError(f"loss_percent {loss_percent} is not in [0, 100]")
        self.prefix = prefix
        self.bed_id = f"{prefix}-{os.getpid()}-{secrets.token_hex(3)}"
        self.subnet = random.randint(0, 255)
        self.rate = rate
        self.burst = burst
        self.tbf_latency = tbf_latency
        self.offloads_off = offloads_off if offloads_off is not None else rate is not None
        self.loss_percent = loss_percent
        self.ipv6 = ipv6
        self.bridge_netns = f"{self.bed_id}-br"
        self.hosts = [
            Host(index=i, name=f"h{i}", netns=f"{self.bed_id}-h{i}", ip=f"10.77.{self.subnet}.{i}",
                 ip6=f"fd77:{self.subnet:x}::{i:x}", ifname="eth0", bridge_port=f"p{i}")
            for i in range(1, hosts + 1)
        ]
        self._created: list[str] = []  # namespaces in creation order
        self._procs: list[subprocess.Popen] = []
        self._cut: set[str] = set()  # bridge ports cut() disconnected
        self._destroyed = False

    # -- life cycle ---------------------------------------------------------

    def create(self) -> "NetBed":
        """Builds the bed. Raises BedUnavailable when namespaces cannot be made
        here, BedError when a later step fails (after removing what was made)."""
        reason = probe(self.prefix)
        if reason is not None:
            raise BedUnavailable(reason)
        needed = ["tc", "ethtool"] if self.offloads_off else []
        if self.rate:
            needed.append("tc")
        if self.loss_percent is not None:
            needed.append("nft")
        for tool in needed:
            if shutil.which(tool) is None:
                raise BedUnavailable(f"`{tool}` is not installed; scripts/install-deps.sh installs it")
        sweep_stale(self.prefix)
        _install_handlers()
        with _live_lock:
            _live_beds.add(self)
        try:
            self._build()
        except BaseException:
            self.destroy()
            raise
        return self

    def _add_netns(self, netns: str) -> None:
        _run(["ip", "netns", "add", netns])
        self._created.append(netns)
        _run(["ip", "-n", netns, "link", "set", "lo", "up"])

    def _build(self) -> None:
        br = self.bridge_netns
        self._add_netns(br)
        _run(["ip", "-n", br, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", br, "link", "set", "br0", "up"])
        for h in self.hosts:
            self._add_netns(h.netns)
            # Both ends are created inside their namespaces: nothing appears in the
            # machine's own namespace, so parallel beds cannot clash on names.
            _run(["ip", "-n", br, "link", "add", h.bridge_port, "type", "veth", "peer", "name",
                  h.ifname, "netns", h.netns])
            _run(["ip", "-n", br, "link", "set", h.bridge_port, "master", "br0"])
            _run(["ip", "-n", br, "link", "set", h.bridge_port, "up"])
            _run(["ip", "-n", h.netns, "addr", "add", f"{h.ip}/24", "dev", h.ifname])
            if self.ipv6:
                _run(["ip", "-n", h.netns, "-6", "addr", "add", f"{h.ip6}/64", "dev", h.ifname,
                      "nodad"])
            _run(["ip", "-n", h.netns, "link", "set", h.ifname, "up"])
            for netns, dev in ((h.netns, h.ifname), (br, h.bridge_port)):
                if self.offloads_off:
                    _run(["ip", "netns", "exec", netns, "ethtool", "-K", dev, "tso", "off", "gso",
                          "off", "gro", "off"])
                if self.rate:
                    _run(["ip", "netns", "exec", netns, "tc", "qdisc", "add", "dev", dev, "root",
                          "tbf", "rate", self.rate, "burst", self.burst, "latency",
                          self.tbf_latency])
        self._write_hosts_files()
        if self.loss_percent is not None:
            self.set_loss(self.loss_percent)

    def _write_hosts_files(self) -> None:
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines += [f"{h.ip}\t{h.name}" for h in self.hosts]
        if self.ipv6:
            lines += [f"{h.ip6}\t{h.name}-v6" for h in self.hosts]
        text = "\n".join(lines) + "\n"
        for h in self.hosts:
            directory = os.path.join(_ETC_NETNS_DIR, h.netns)
            os.makedirs(directory, exist_ok=True)
            with open(os.path.join(directory, "hosts"), "w", encoding="ascii") as f:
                f.write(text)

    def destroy(self) -> None:
        """Kills every process the bed started or that lives in its namespaces,
        then removes the namespaces. Safe to call more than once."""
        if self._destroyed:
            return
        self._destroyed = True
        errors = []
        self._stop_processes()
        for netns in reversed(self._created):
            try:
                _remove_namespace(netns)
            except BedError as e:
                errors.append(str(e))
        for h in self.hosts:
            shutil.rmtree(os.path.join(_ETC_NETNS_DIR, h.netns), ignore_errors=True)
        with _live_lock:
            _live_beds.discard(self)
        if errors:
            raise BedError("; ".join(errors))

    def _stop_processes(self, grace_s: float = 2.0) -> None:
        live = [p for p in self._procs if p.poll() is None]
        for p in live:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        end = time.monotonic() + grace_s
        for p in live:
            try:
                p.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in live:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in live:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def __enter__(self) -> "NetBed":
        return self.create()

    def __exit__(self, *exc) -> None:
        self.destroy()

    # -- running programs on hosts -------------------------------------------

    def host(self, which: int | str | Host) -> Host:
        """A host by 1-based index, by name ("h2") or itself."""
        if isinstance(which, Host):
            return which
        for h in self.hosts:
            if which in (h.index, h.name):
                return h
        raise KeyError(f"bed {self.bed_id} has no host {which!r}")

    def command(self, which: int | str | Host, argv: Sequence[str],
                set_hostname: bool = True) -> list[str]:
        """The argv that runs `argv` on a host (in its namespace, with its hostname)."""
        h = self.host(which)
        prefix = ["ip", "netns", "exec", h.netns]
        if set_hostname:
            prefix += ["unshare", "--uts", "--", "/bin/sh", "-c", 'hostname "$0" && exec "$@"',
                       h.name]
        return prefix + [str(a) for a in argv]

    def popen(self, which: int | str | Host, argv: Sequence[str], *,
              env: Mapping[str, str] | None = None, set_hostname: bool = True,
              die_with_parent: bool = True, **kwargs) -> subprocess.Popen:
        """Starts `argv` on a host and returns its Popen. The process leads a new
        process group (so destroy() reaches its children too) and, with
        die_with_parent, is SIGKILLed by the kernel if this process dies first
        (the kernel ties that to the calling thread: start processes from a
        thread that outlives them). `env`, when given, is the whole environment.
        Other keyword arguments go to subprocess.Popen."""
        if self._destroyed or not self._created:
            raise BedError(f"bed {self.bed_id} is not up")
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        preexec = kill_with_parent(signal.SIGKILL) if die_with_parent else None
        proc = subprocess.Popen(self.command(which, argv, set_hostname),
                                env=dict(env) if env is not None else None,
                                start_new_session=True, preexec_fn=preexec, **kwargs)
        self._procs.append(proc)
        return proc

    def run(self, which: int | str | Host, argv: Sequence[str], *, timeout: float = 60.0,
            check: bool = True, env: Mapping[str, str] | None = None,
            set_hostname: bool = True) -> subprocess.CompletedProcess:
        """Runs `argv` on a host to completion, capturing its output as text.
        Raises BedError on a non-zero exit (with check) or after `timeout` s."""
        proc = self.popen(which, argv, env=env, set_hostname=set_hostname,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise BedError(f"`{' '.join(map(str, argv))}` on {self.host(which).name} did not finish "
                           f"in {timeout} s; stdout: {out!r} stderr: {err!r}") from None
        result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        if check and proc.returncode != 0:
            raise BedError(f"`{' '.join(map(str, argv))}` on {self.host(which).name} exited "
                           f"{proc.returncode}; stderr: {err.strip()}")
        return result

    def processes(self) -> list[subprocess.Popen]:
        """Every process started with popen()/run(), finished or not."""
        return list(self._procs)

    # -- network conditions -------------------------------------------------

    def set_loss(self, percent: float) -> None:
        """Drops `percent` % of the packets the bridge forwards (0 removes the rule)."""
        if not 0 <= percent <= 100:
            raise ValueError(f"loss {percent} is not in [0, 100]")
        br = self.bridge_netns
        _run(["ip", "netns", "exec", br, "nft", "delete", "table", "bridge", "netbed"], check=False)
        self.loss_percent = percent
        if percent == 0:
            return
        threshold = int(round(percent * 100))
        ruleset = ("table bridge netbed {\n"
                   "  chain forward {\n"
                   "    type filter hook forward priority 0; policy accept;\n"
                   f"    numgen random mod 10000 < {threshold} counter drop\n"
                   "  }\n"
                   "}\n")
        self._load_nft(ruleset)

    def _load_nft(self, ruleset: str) -> None:
        """Loads an nftables ruleset into the bridge's namespace."""
        br = self.bridge_netns
        result = subprocess.run(["ip", "netns", "exec", br, "nft", "-f", "-"], input=ruleset,
                                capture_output=True, text=True, timeout=30)
        if result.returncode != 0:
            raise BedError(f"nft in {br} failed: {result.stderr.strip()}")

    def cut(self, which: int | str | Host) -> None:
        """Cuts a host's cable: the bridge drops every frame from and to its port,
        as if the link were unplugged between the host and the switch. The host's
        own interface stays up (no carrier change tells its programs), so TCP
        connections survive a cut as long as their peers' patience does.
        restore() undoes it. Several hosts may be cut at once."""
        self._cut.add(self.host(which).bridge_port)
        self._apply_cuts()

    def restore(self, which: int | str | Host) -> None:
        """Reconnects a host that cut() disconnected (a no-op for a connected one)."""
        self._cut.discard(self.host(which).bridge_port)
        self._apply_cuts()

    def cut_hosts(self) -> list[str]:
        """Names of the hosts cut off now."""
        return [h.name for h in self.hosts if h.bridge_port in self._cut]

    def _apply_cuts(self) -> None:
        # A table of its own, so that cuts and the loss rule are independent;
        # priority -10 runs it before the loss chain.
        br = self.bridge_netns
        _run(["ip", "netns", "exec", br, "nft", "delete", "table", "bridge", "netbed_cut"],
             check=False)
        if not self._cut:
            return
        rules = "".join(f'    iifname "{port}" drop\n    oifname "{port}" drop\n'
                        for port in sorted(self._cut))
        ruleset = ("table bridge netbed_cut {\n"
                   "  chain forward {\n"
                   "    type filter hook forward priority -10; policy accept;\n"
                   f"{rules}"
                   "  }\n"
                   "}\n")
        self._load_nft(ruleset)

    def dropped_packets(self) -> int:
        """Packets the loss rule has dropped so far (0 without a loss rule)."""
        result = _run(["ip", "netns", "exec", self.bridge_netns, "nft", "list", "table", "bridge",
                       "netbed"], check=False)
        m = re.search(r"counter packets (\d+)", result.stdout)
        return int(m.group(1)) if m else 0

    def qdisc(self, which: int | str | Host) -> str:
        """`tc qdisc show` of a host's interface, for checks and diagnostics."""
        h = self.host(which)
        return _run(["ip", "netns", "exec", h.netns, "tc", "qdisc", "show", "dev",
                     h.ifname]).stdout

    def __repr__(self) -> str:
        return f"NetBed({self.bed_id}, hosts={[h.ip for h in self.hosts]})"


def _main(argv: Iterable[str]) -> int:
    parser = argparse.ArgumentParser(
        description="Build a bed of network-namespace hosts and hold it until Ctrl-C, "
                    "or remove the namespaces of dead beds.")
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--prefix", default=DEFAULT_PREFIX)
    parser.add_argument("--rate", help='tc rate of every link, e.g. "1gbit"')
    parser.add_argument("--loss", type=float, help="percent of bridged packets to drop")
    parser.add_argument("--cleanup", action="store_true",
                        help="remove namespaces of beds whose creating process is dead, then exit")
    args = parser.parse_args(list(argv))
    if args.cleanup:
        for name in sweep_stale(args.prefix):
            print(f"removed {name}")
        return 0
    try:
        with NetBed(args.hosts, prefix=args.prefix, rate=args.rate,
                    loss_percent=args.loss) as bed:
            for h in bed.hosts:
                print(f"{h.name}\t{h.ip}\t{h.ip6}\tip netns exec {h.netns} ...")
            print(f"bridge namespace {bed.bridge_netns}; Ctrl-C removes the bed", flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    except BedUnavailable as e:
        print(f"netbed: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
