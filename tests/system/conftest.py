"""Fixtures shared by the system tests (real processes, real sockets).

ctest runs each tests/system/test_*.py under Debian's /usr/bin/python3 with
TANDEM_BIN_DIR pointing at the build's bin/ directory.

Fixtures:
  tandem_bin_dir  the directory holding `tandem` and the test programs
  launch          starts `tandem launch ...` jobs; every job is torn down and
                  checked for left-over processes when the test ends
  netbed          builds multi-host beds of network namespaces (netbed.py);
                  skips the test where namespaces cannot be made

A job's processes are found by a tag: `launch` puts TANDEM_TEST_JOB_TAG=<unique>
into the launcher's environment, every process of the job inherits it, and
/proc/<pid>/environ tells which processes carry it. That finds them whatever
process group or parent they end up with.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Mapping, Sequence

import pytest

import netbed as netbed_module

TAG_VARIABLE = "TANDEM_TEST_JOB_TAG"
_REPO_ROOT = Path(__file__).resolve().parents[2]


# -- the build ------------------------------------------------------------------


@pytest.fixture(scope="session")
def tandem_bin_dir() -> Path:
    """The build's bin/ directory: $TANDEM_BIN_DIR, else build/bin of the repository."""
    configured = os.environ.get("TANDEM_BIN_DIR")
    candidate = Path(configured) if configured else _REPO_ROOT / "build" / "bin"
    if not (candidate / "tandem").is_file():
        pytest.fail(f"no tandem binary in {candidate}: build first (scripts/build.sh) and set "
                    "TANDEM_BIN_DIR to the build's bin/ directory", pytrace=False)
    return candidate


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the kernel's choice for port 0)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


# -- finding a job's processes ----------------------------------------------------


@dataclasses.dataclass
class ProcInfo:
    """A live process, as /proc shows it."""

    pid: int
    argv: list[str]
    env: dict[str, str]

    def __str__(self) -> str:
        role = self.env.get("DMLC_ROLE", "?")
        return f"pid {self.pid} ({role}): {' '.join(self.argv)}"


def _read_proc(pid: int) -> ProcInfo | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw_env = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw_argv = f.read()
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # A zombie has exited already; its parent just has not reaped it.
    state = stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3]
    if state in (b"Z", b"X"):
        return None
    env = {}
    for item in raw_env.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    argv = [a.decode(errors="replace") for a in raw_argv.split(b"\0") if a]
    return ProcInfo(pid, argv, env)


def processes_with_tag(tag: str) -> list[ProcInfo]:
    """Every live process whose environment has TANDEM_TEST_JOB_TAG=tag."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        info = _read_proc(int(name))
        if info is not None and info.env.get(TAG_VARIABLE) == tag:
            found.append(info)
    return found


# -- jobs -----------------------------------------------------------------------------


class JobTimeout(AssertionError):
    """A job did not finish in time; the message carries its output."""


class Job:
    """One running `tandem launch` (or any command tagged the same way).

    Output is read by two threads into `lines` as (stream, text) pairs in the
    order they arrived. Use from the test's thread.
    """

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], tag: str, cwd: Path | None):
        self.argv = list(argv)
        self.tag = tag
        self.lines: list[tuple[str, str]] = []
        self._cond = threading.Condition()
        self.started = time.monotonic()
        self.finished: float | None = None
        # The launcher leads its own process group (so Ctrl-C reaches it alone,
        # as a user's would reach the foreground job) and gets SIGTERM if the test
        # process dies, so that it can still tear its job down.
        self.proc = subprocess.Popen(self.argv, env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True,
                                     preexec_fn=netbed_module.kill_with_parent(signal.SIGTERM))
        self._readers = [threading.Thread(target=self._read, args=(stream, name), daemon=True)
                         for stream, name in ((self.proc.stdout, "stdout"),
                                              (self.proc.stderr, "stderr"))]
        for t in self._readers:
            t.start()

    def _read(self, stream, name: str) -> None:
        for raw in iter(stream.readline, b""):
            with self._cond:
                self.lines.append((name, raw.decode(errors="replace").rstrip("\n")))
                self._cond.notify_all()
        stream.close()

    # -- output --

    @property
    def stdout(self) -> str:
        with self._cond:
            return "\n".join(text for stream, text in self.lines if stream == "stdout")

    @property
    def stderr(self) -> str:
        with self._cond:
            return "\n".join(text for stream, text in self.lines if stream == "stderr")

    @property
    def output(self) -> str:
        """stdout and stderr interleaved as they arrived."""
        with self._cond:
            return "\n".join(text for _, text in self.lines)

    def wait_for_line(self, pattern: str, timeout: float = 60.0) -> re.Match:
        """Blocks until a line of output matches `pattern` (re.search); returns the match.
        Raises JobTimeout, with the output so far, when none does in time or the job ends."""
        regex = re.compile(pattern)
        end = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for _, text in self.lines[seen:]:
                    m = regex.search(text)
                    if m:
                        return m
                seen = len(self.lines)
                left = end - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and
                                 not any(t.is_alive() for t in self._readers)):
                    break
                self._cond.wait(timeout=min(left, 0.2))
        raise JobTimeout(f"no output line matched {pattern!r} within {timeout} s "
                         f"(job {'ended' if self.proc.poll() is not None else 'running'})\n"
                         f"{self.describe()}")

    # -- life --

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float = 120.0) -> int:
        """Waits for the launcher to exit and its output to drain; returns its exit code.
        On timeout the job is stopped (stop()) and JobTimeout raised with its output."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise JobTimeout(f"job did not finish within {timeout} s\n{self.describe()}") from None
        for t in self._readers:
            t.join(timeout=10)
        if self.finished is None:
            self.finished = time.monotonic()
        return self.proc.returncode

    def interrupt(self) -> None:
        """Sends SIGINT to the launcher, as Ctrl-C in its terminal would."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)

    def stop(self, grace: float = 10.0) -> None:
        """Stops the job however it behaves: SIGINT to the launcher, then after
        `grace` seconds SIGKILL to its group and to every tagged process."""
        self.interrupt()
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait(timeout=10)
        self.kill_leftovers()

    def processes(self) -> list[ProcInfo]:
        """The job's live processes (launcher included), by their tag."""
        return processes_with_tag(self.tag)

    def role_processes(self, role: str) -> list[ProcInfo]:
        """The job's live processes whose DMLC_ROLE is `role` (scheduler, server, worker)."""
        return [p for p in self.processes() if p.env.get("DMLC_ROLE") == role]

    def leftovers(self, grace: float = 5.0) -> list[ProcInfo]:
        """Processes of the job still alive `grace` seconds after the launcher ended
        (returns as soon as there are none)."""
        end = time.monotonic() + grace
        while True:
            left = [p for p in self.processes() if p.pid != self.proc.pid]
            if not left or time.monotonic() >= end:
                return left
            time.sleep(0.1)

    def assert_no_leftovers(self, grace: float = 5.0) -> None:
        """Fails (and kills them) if any process of the job outlives the launcher by `grace` s."""
        left = self.leftovers(grace)
        if left:
            self.kill_leftovers()
            raise AssertionError("processes of the job were left behind:\n  " +
                                 "\n  ".join(map(str, left)) + "\n" + self.describe())

    def kill_leftovers(self) -> None:
        for p in self.processes():
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def describe(self, last: int = 200) -> str:
        """The command, exit state and the last `last` lines of output, for failure messages."""
        with self._cond:
            tail = self.lines[-last:]
        state = self.proc.poll()
        return (f"command: {' '.join(self.argv)}\n"
                f"exit code: {'running' if state is None else state}\n"
                f"output (last {len(tail)} lines):\n" +
                "\n".join(f"  [{stream}] {text}" for stream, text in tail))


@dataclasses.dataclass
class JobResult:
    returncode: int
    stdout: str
    stderr: str
    output: str
    seconds: float
    job: Job


class Launcher:
    """The `launch` fixture's value: starts `tandem launch` jobs."""

    def __init__(self, bin_dir: Path):
        self.bin_dir = bin_dir
        self.jobs: list[Job] = []

    def argv(self, workers: int, servers: int, command: Sequence[str], *,
             launcher: str = "local", env: Mapping[str, str] | None = None,
             extra_args: Sequence[str] = ()) -> list[str]:
        """The `tandem launch` command line for these arguments."""
        argv = [str(self.bin_dir / "tandem"), "launch", "--launcher", launcher,
                "-n", str(workers), "-s", str(servers)]
        for key, value in (env or {}).items():
            argv += ["--env", f"{key}={value}"]
        argv += list(extra_args)
        return argv + ["--"] + [str(c) for c in command]

    def start(self, workers: int, servers: int, command: Sequence[str], *,
              launcher: str = "local", env: Mapping[str, str] | None = None,
              launcher_env: Mapping[str, str] | None = None,
              extra_args: Sequence[str] = (), cwd: Path | None = None) -> Job:
        """Starts a job and returns at once. `env` becomes `--env K=V` arguments
        (for the job's processes); `launcher_env` is added to the launcher's own
        environment (which the processes inherit)."""
        argv = self.argv(workers, servers, command, launcher=launcher, env=env,
                         extra_args=extra_args)
        return self.start_command(argv, env=launcher_env, cwd=cwd)

    def start_command(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                      cwd: Path | None = None) -> Job:
        """Starts any command as a tagged job (e.g. `tandem scheduler` by hand)."""
        full_env = dict(os.environ)
        full_env.update(env or {})
        tag = secrets.token_hex(8)
        full_env[TAG_VARIABLE] = tag
        job = Job(argv, full_env, tag, cwd)
        self.jobs.append(job)
        return job

    def __call__(self, workers: int, servers: int, command: Sequence[str], *,
                 timeout: float = 120.0, check_leftovers: bool = True, **kwargs) -> JobResult:
        """Runs a job to completion (see start() for the arguments) and returns its
        result; raises JobTimeout after `timeout` s. With check_leftovers, fails if
        any process of the job outlives the launcher."""
        job = self.start(workers, servers, command, **kwargs)
        code = job.wait(timeout)
        if check_leftovers:
            job.assert_no_leftovers()
        return JobResult(code, job.stdout, job.stderr, job.output,
                         (job.finished or time.monotonic()) - job.started, job)

    def close(self) -> list[str]:
        """Stops every job still running; returns descriptions of left-over processes."""
        problems = []
        for job in self.jobs:
            if job.proc.poll() is None:
                job.stop()
            left = job.leftovers(grace=5.0)
            if left:
                problems.append(f"{' '.join(job.argv)}:\n  " + "\n  ".join(map(str, left)))
                job.kill_leftovers()
        return problems


@pytest.fixture
def launch(tandem_bin_dir: Path):
    """Runs `tandem launch` jobs; see Launcher. At the end of the test every job
    still running is stopped, and a process of any job left alive fails the test."""
    launcher = Launcher(tandem_bin_dir)
    yield launcher
    problems = launcher.close()
    if problems:
        pytest.fail("processes left behind after the test:\n" + "\n".join(problems),
                    pytrace=False)


# -- multi-host beds -------------------------------------------------------------------


@pytest.fixture
def netbed():
    """A factory of network-namespace beds: `bed = netbed(3, rate="1gbit")` takes
    NetBed's arguments. Skips the test (with the reason) where namespaces cannot
    be made; removes every bed and its processes when the test ends."""
    beds: list[netbed_module.NetBed] = []

    def make(hosts: int = 3, **kwargs) -> netbed_module.NetBed:
        bed = netbed_module.NetBed(hosts, **kwargs)
        try:
            bed.create()
        except netbed_module.BedUnavailable as e:
            pytest.skip(f"multi-host bed unavailable: {e}")
        beds.append(bed)
        return bed

    yield make
    errors = []
    for bed in reversed(beds):
        try:
            bed.destroy()
        except netbed_module.BedError as e:
            errors.append(str(e))
    if errors:
        pytest.fail("bed tear-down failed: " + "; ".join(errors), pytrace=False)
