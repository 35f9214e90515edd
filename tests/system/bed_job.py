"""A tandem job spread over the hosts of a NetBed (netbed.py), each process
started inside its host with the plain DMLC environment, the way a cluster
manager would start it: the scheduler addressed by host name, no
DMLC_NODE_HOST (a node finds its address from the route to the scheduler),
ranks left to the scheduler.

    job = BedJob(bed, [(1, "scheduler"), (2, "server"), (3, "worker")],
                 [bin_dir / "kv_rounds", "--rounds", "50"], env={"PS_RESEND": "1"})
    job.wait_all(timeout=60)
    job.procs[2].output, job.procs[2].returncode, job.procs[2].exited_at

Every process's output (stdout and stderr merged) is read by a thread into
lines stamped with time.monotonic(); another thread per process waits for it
and stamps its exit, so a test can measure from an event (a kill, a cut) to
each survivor's exit. Used by tests/system/test_faults_netbed.py and
bench/netbed_run.py; docs/netbed.md describes it.

Threads: create, kill and inspect a job from one thread (the one that made
the bed's processes: their PR_SET_PDEATHSIG is tied to it); the reader and
waiter threads only append and stamp under the job's lock.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import signal
import subprocess
import threading
import time
from typing import Mapping, Sequence

import netbed

JOINED = re.compile(r"joined: (scheduler|server (\d+)|worker (\d+)) \(node \d+, ([^)]+)\)")


@dataclasses.dataclass
class BedProcess:
    """One process of a job: where it runs, what it printed, when it ended.
    `lines` and `exited_at` are written by the job's reader and waiter
    threads (appends and one assignment); the test's thread reads them."""

    host: netbed.Host
    role: str  # scheduler, server, worker
    popen: subprocess.Popen
    started_at: float
    lines: list[tuple[float, str]] = dataclasses.field(default_factory=list)
    exited_at: float | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode if self.exited_at is not None else None

    @property
    def output(self) -> str:
        return "\n".join(text for _, text in list(self.lines))

    def rank(self) -> int | None:
        """The rank the scheduler gave this process (from its PS_VERBOSE=1
        "joined:" line), None before it joined or for the scheduler."""
        for _, text in list(self.lines):
            m = JOINED.search(text)
            if m:
                r = m.group(2) or m.group(3)
                return int(r) if r is not None else None
        return None

    def name(self) -> str:
        r = self.rank()
        return f"{self.role}{'' if r is None else ' ' + str(r)} on {self.host.name} (pid {self.pid})"

    def rss_kib(self) -> int | None:
        """Resident memory (VmRSS of /proc/PID/status) in KiB; None once it exited."""
        try:
            with open(f"/proc/{self.pid}/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            return None
        return None


def dmlc_environment(role: str, scheduler: netbed.Host, port: int, servers: int, workers: int,
                     secret: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of one process of a job: DMLC's contract and nothing
    inherited from the caller except PATH; `extra` adds or overrides variables."""
    env = {
        "PATH": "/usr/bin:/bin",
        "DMLC_ROLE": role,
        "DMLC_PS_ROOT_URI": scheduler.name,
        "DMLC_PS_ROOT_PORT": str(port),
        "DMLC_NUM_SERVER": str(servers),
        "DMLC_NUM_WORKER": str(workers),
        "TANDEM_SECRET": secret,
        "PS_VERBOSE": "1",  # the "joined:" lines name each process's rank
        "TANDEM_START_TIMEOUT": "60",
    }
    env.update(extra or {})
    return env


class BedJob:
    """Starts one process per (host, role) of `placement` running `argv`
    (a program that serves the scheduler and server roles itself through
    tandem::ServeAssignedRole, or per-role argv through `argv_for`)."""

    def __init__(self, bed: netbed.NetBed, placement: Sequence[tuple[int | str, str]],
                 argv: Sequence[str] | None = None, *, env: Mapping[str, str] | None = None,
                 port: int = 9200, argv_for: Mapping[str, Sequence[str]] | None = None):
        if argv is None and not argv_for:
            raise ValueError("give argv or argv_for")
        roles = [role for _, role in placement]
        if roles.count("scheduler") != 1:
            raise ValueError(f"a job has exactly one scheduler, placement has {roles}")
        self.bed = bed
        self.servers = roles.count("server")
        self.workers = roles.count("worker")
        self.scheduler_host = bed.host(next(h for h, r in placement if r == "scheduler"))
        self.secret = secrets.token_hex(16)
        self.procs: list[BedProcess] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        for which, role in placement:
            host = bed.host(which)
            command = list((argv_for or {}).get(role, argv or []))
            proc_env = dmlc_environment(role, self.scheduler_host, port, self.servers,
                                        self.workers, self.secret, env)
            popen = bed.popen(host, [str(a) for a in command], env=proc_env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            p = BedProcess(host, role, popen, time.monotonic())
            self.procs.append(p)
            for target in (self._read, self._wait):
                t = threading.Thread(target=target, args=(p,), daemon=True)
                t.start()
                self._threads.append(t)

    def _read(self, p: BedProcess) -> None:
        for raw in iter(p.popen.stdout.readline, b""):
            line = raw.decode(errors="replace").rstrip("\n")
            with self._lock:
                p.lines.append((time.monotonic(), line))
        p.popen.stdout.close()

    def _wait(self, p: BedProcess) -> None:
        p.popen.wait()
        with self._lock:
            p.exited_at = time.monotonic()

    # -- selecting processes --

    def role(self, role: str) -> list[BedProcess]:
        return [p for p in self.procs if p.role == role]

    def by_rank(self, role: str, rank: int) -> BedProcess:
        for p in self.role(role):
            if p.rank() == rank:
                return p
        raise KeyError(f"no {role} {rank} has joined yet:\n{self.describe()}")

    def alive(self) -> list[BedProcess]:
        return [p for p in self.procs if p.exited_at is None]

    # -- waiting --

    def wait_for(self, pattern: str, count: int = 1, timeout: float = 60.0,
                 role: str | None = None) -> float:
        """Waits until `count` processes (of `role`, if given) printed a line
        matching `pattern`; returns the time of the last of them. Raises
        AssertionError with every output on timeout or when all have exited."""
        regex = re.compile(pattern)
        end = time.monotonic() + timeout
        while True:
            stamps = []
            for p in self.procs:
                if role is not None and p.role != role:
                    continue
                hit = next((t for t, text in list(p.lines) if regex.search(text)), None)
                if hit is not None:
                    stamps.append(hit)
            if len(stamps) >= count:
                return sorted(stamps)[count - 1]
            if time.monotonic() > end or not self.alive():
                raise AssertionError(f"{count} processes did not print /{pattern}/ within "
                                     f"{timeout} s (got {len(stamps)})\n{self.describe()}")
            time.sleep(0.02)

    def wait_all(self, timeout: float, only: Sequence[BedProcess] | None = None) -> bool:
        """Waits until every process (or every one of `only`) exited; False if
        some are alive after `timeout` s."""
        end = time.monotonic() + timeout
        while [p for p in self.alive() if only is None or p in only]:
            if time.monotonic() > end:
                return False
            time.sleep(0.02)
        if only is None:
            for t in self._threads:
                t.join(timeout=5)
        return True

    # -- breaking and cleaning up --

    def kill(self, p: BedProcess, sig: int = signal.SIGKILL) -> float:
        """Sends `sig` to one process by its PID; returns the time it was sent."""
        os.kill(p.pid, sig)
        return time.monotonic()

    def stop(self) -> None:
        """SIGKILLs every process of the job still alive (by PID) and reaps them."""
        for p in self.alive():
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.wait_all(timeout=10)

    def leftovers(self) -> list[str]:
        """What outlives the job: its own PIDs not yet exited (an exit is stamped
        when waitpid() returned for that PID), and any process left in the
        bed's host namespaces (a child a process might have forked)."""
        left = [f"{p.name()} still alive" for p in self.procs if p.exited_at is None]
        for h in self.bed.hosts:
            pids = netbed.namespace_pids(h.netns)
            if pids:
                left.append(f"processes {pids} still in {h.name}")
        return left

    def describe(self, last: int = 40) -> str:
        """Every process's state and the last `last` lines of its output."""
        parts = []
        for p in self.procs:
            state = "running" if p.exited_at is None else f"exit {p.popen.returncode}"
            tail = list(p.lines)[-last:]
            parts.append(f"--- {p.name()} [{state}]\n" + "\n".join(t for _, t in tail))
        return "\n".join(parts)

