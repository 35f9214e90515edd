"""A real one-machine Grid Engine cell for the system tests: sge_qmaster and
sge_execd of Debian's gridengine packages, run in the foreground (SGE_ND)
with a cell of their own in a temporary directory (SGE_ROOT/SGE_CELL, their
spool directories, ports chosen free), one execution host `localhost`, a
queue on it and a parallel environment `tandem` with control_slaves TRUE
and job_is_first_task FALSE, as tight integration (qrsh -inherit) needs.
Every name the cell uses resolves to 127.0.0.1 (the machine's own name is
an alias of `localhost` in the cell's host_aliases), so its traffic stays
on loopback.

When the module's tests are done every job is deleted, the daemons are
stopped by their PIDs, any process that still runs in the cell (found by
its environment, never by its name) is killed, and the directory is
removed, however the tests ended.

Test modules import `sge_cell` (a module-scoped fixture yielding a
SgeCell: the environment Grid Engine's clients need, and what runs in the
cell) and `requires_sge` (their pytestmark). A machine without the
packages fails the tests when they run as root (CI installs them with
scripts/install-deps.sh); they are skipped when not run as root (the
cell's execd runs their jobs as root)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import free_port

PE = "tandem"
QUEUE = "tandem.q"
CELL = "tandemtest"
SLOTS = 16
PACKAGED = Path("/var/lib/gridengine")  # SGE_ROOT of the packages: bin/, utilbin/, util/
PROGRAMS = ("/usr/sbin/sge_qmaster", "/usr/sbin/sge_execd", "/usr/bin/qsub", "/usr/bin/qrsh",
            "/usr/bin/qconf", "/usr/lib/gridengine/spoolinit",
            "/usr/share/gridengine/default-configuration")

requires_sge = pytest.mark.skipif(os.geteuid() != 0,
                                  reason="the test's Grid Engine cell runs its jobs as root")


def _missing() -> list[str]:
    return [p for p in PROGRAMS if not Path(p).exists()]


BOOTSTRAP = """\
admin_user              none
default_domain          none
ignore_fqdn             true
spooling_method         classic
spooling_lib            libspoolc
spooling_params         {common};{spool}/qmaster
binary_path             /usr/sbin
qmaster_spool_dir       {spool}/qmaster
security_mode           none
listener_threads        2
worker_threads          2
scheduler_threads       1
"""

EXEC_HOST = """\
hostname              localhost
load_scaling          NONE
complex_values        NONE
user_lists            NONE
xuser_lists           NONE
projects              NONE
xprojects             NONE
usage_scaling         NONE
report_variables      NONE
"""

PARALLEL_ENVIRONMENT = f"""\
pe_name            {PE}
slots              {SLOTS * 4}
user_lists         NONE
xuser_lists        NONE
start_proc_args    NONE
stop_proc_args     NONE
allocation_rule    $fill_up
control_slaves     TRUE
job_is_first_task  FALSE
urgency_slots      min
accounting_summary FALSE
qsort_args         NONE
"""

# Every field of a cluster queue: qconf -Aq needs them all.
QUEUE_CONF = f"""\
qname                 {QUEUE}
hostlist              localhost
seq_no                0
load_thresholds       NONE
suspend_thresholds    NONE
nsuspend              1
suspend_interval      00:05:00
priority              0
min_cpu_interval      00:05:00
processors            UNDEFINED
qtype                 BATCH INTERACTIVE
ckpt_list             NONE
pe_list               {PE}
rerun                 FALSE
slots                 {SLOTS}
tmpdir                /tmp
shell                 /bin/sh
prolog                NONE
epilog                NONE
shell_start_mode      posix_compliant
starter_method        NONE
suspend_method        NONE
resume_method         NONE
terminate_method      NONE
notify                00:00:60
owner_list            NONE
user_lists            NONE
xuser_lists           NONE
subordinate_list      NONE
complex_values        NONE
projects              NONE
xprojects             NONE
calendar              NONE
initial_state         default
""" + "".join(f"{limit:<22}INFINITY\n" for limit in (
    "s_rt", "h_rt", "s_cpu", "h_cpu", "s_fsize", "h_fsize", "s_data", "h_data", "s_stack",
    "h_stack", "s_core", "h_core", "s_rss", "h_rss", "s_vmem", "h_vmem"))


def _global_configuration(spool: Path) -> str:
    """Debian's default configuration with what a test cell needs: root may
    run jobs (min_uid 0), no mail, a load report every 2 s, and every
    process of a finished job killed by its additional group id."""
    lines = []
    for line in Path("/usr/share/gridengine/default-configuration").read_text().splitlines():
        name = line.split()[0] if line.split() else ""
        replaced = {"execd_spool_dir": f"execd_spool_dir {spool}/execd",
                    "min_uid": "min_uid 0", "min_gid": "min_gid 0",
                    "mailer": "mailer /bin/true",
                    "load_report_time": "load_report_time 00:00:02",
                    "execd_params": "execd_params ENABLE_ADDGRP_KILL=true"}.get(name)
        lines.append(replaced if replaced else line)
    return "\n".join(lines) + "\n"


def cell_processes(root: Path, keep: set[int]) -> list[int]:
    """PIDs of live processes (not zombies) that run in the cell (their
    SGE_ROOT is `root`), other than `keep`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in keep or int(name) == os.getpid():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            if stat[stat.rfind(")") + 2] in "ZX":
                continue
            environ = Path(f"/proc/{name}/environ").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if f"SGE_ROOT={root}".encode() in environ.split(b"\0"):
            found.append(int(name))
    return found


def jobs(env: dict[str, str]) -> str:
    """qstat's list of every user's jobs in the cell ('' when none)."""
    return subprocess.run(["qstat", "-u", "*"], env=env, capture_output=True, text=True,
                          timeout=30).stdout.strip()


@dataclasses.dataclass
class SgeCell:
    """The running cell, as the fixture yields it."""

    env: dict[str, str]  # SGE_ROOT, SGE_CELL and the ports: what qsub and qrsh need
    root: Path
    daemons: list[int]  # sge_qmaster's and sge_execd's PIDs

    def jobs(self) -> str:
        return jobs(self.env)

    def processes(self) -> list[int]:
        """What runs in the cell besides its daemons: shepherds and jobs."""
        return cell_processes(self.root, set(self.daemons))

    def assert_empty(self, within: float = 10.0) -> None:
        """Fails unless, within `within` seconds, no job is listed and
        nothing but the daemons runs in the cell."""
        end = time.monotonic() + within
        while (self.jobs() or self.processes()) and time.monotonic() < end:
            time.sleep(0.2)
        listed, left = self.jobs(), self.processes()
        described = []
        for pid in left:
            try:
                described.append(f"pid {pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes()
                                 .replace(b"\0", b" ").decode(errors="replace"))
            except FileNotFoundError:
                pass
        assert not listed and not described, (
            f"left in the Grid Engine cell after {within} s:\n{listed}\n" + "\n".join(described))


def _run(argv: list[str], env: dict[str, str], what: str) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"{what}: {' '.join(argv)} exited {done.returncode}: "
                           f"{done.stdout}{done.stderr}")
    return done.stdout


def _wait(predicate, seconds: float, what: str, log: Path):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.2)
    pytest.fail(f"the test's Grid Engine cell: {what} within {seconds} s\n"
                + (log.read_text()[-3000:] if log.exists() else ""), pytrace=False)


@pytest.fixture(scope="module")
def sge_cell():
    """A running one-machine cell; yields a SgeCell."""
    missing = _missing()
    if missing:
        pytest.fail("Grid Engine is not installed (missing " + ", ".join(missing) + "): install "
                    "gridengine-master, gridengine-exec and gridengine-client with "
                    "scripts/install-deps.sh", pytrace=False)
    d = Path(tempfile.mkdtemp(prefix="tandem-sge."))
    root, spool = d / "root", d / "spool"
    common = root / CELL / "common"
    daemons: list[subprocess.Popen] = []
    env = {}
    try:
        common.mkdir(parents=True)
        (spool / "qmaster").mkdir(parents=True)
        (spool / "execd").mkdir()
        for sub in ("bin", "lib", "util", "utilbin"):
            (root / sub).symlink_to(PACKAGED / sub)
        (common / "bootstrap").write_text(BOOTSTRAP.format(common=common, spool=spool))
        (common / "act_qmaster").write_text("localhost\n")
        names = {socket.gethostname(), socket.getfqdn()} - {"localhost"}
        (common / "host_aliases").write_text(" ".join(["localhost", *sorted(names)]) + "\n")
        (d / "global.conf").write_text(_global_configuration(spool))
        env = dict(os.environ, SGE_ROOT=str(root), SGE_CELL=CELL,
                   SGE_QMASTER_PORT=str(free_port()), SGE_EXECD_PORT=str(free_port()))
        for stale in ("PE_HOSTFILE", "JOB_ID", "SGE_TASK_ID"):
            env.pop(stale, None)
        _run(["/usr/lib/gridengine/spoolinit", "classic", "libspoolc", f"{common};{spool}/qmaster",
              "init"], env, "spool")
        for kind, source in (("configuration", d / "global.conf"),
                             ("complexes", "/usr/share/gridengine/util/resources/centry"),
                             ("usersets", "/usr/share/gridengine/util/resources/usersets"),
                             ("managers", "root"), ("adminhosts", "localhost")):
            _run(["/usr/lib/gridengine/spooldefaults", kind, str(source)], env, "spool defaults")
        log = d / "daemons.log"
        with open(log, "w") as out:
            # SGE_ND: the daemons stay in the foreground, so their PIDs are ours.
            daemons.append(subprocess.Popen(["/usr/sbin/sge_qmaster"], env=dict(env, SGE_ND="1"),
                                            stdout=out, stderr=subprocess.STDOUT))

            def answers() -> bool:
                return subprocess.run(["qconf", "-sh"], env=env, capture_output=True,
                                      timeout=30).returncode == 0

            _wait(answers, 30, "sge_qmaster did not answer", log)
            _run(["qconf", "-as", "localhost"], env, "submit host")
            for flag, text in (("-Ae", EXEC_HOST), ("-Ap", PARALLEL_ENVIRONMENT),
                               ("-Aq", QUEUE_CONF)):
                conf = d / f"conf{flag}"
                conf.write_text(text)
                _run(["qconf", flag, str(conf)], env, f"qconf {flag}")
            # Schedule at once: every second, and when a job is submitted or ends.
            scheduler = _run(["qconf", "-ssconf"], env, "scheduler configuration")
            quick = {"schedule_interval": "0:0:1", "flush_submit_sec": "1",
                     "flush_finish_sec": "1"}
            conf = d / "sched.conf"
            conf.write_text("\n".join(
                f"{line.split()[0]} {quick[line.split()[0]]}"
                if line.split() and line.split()[0] in quick else line
                for line in scheduler.splitlines()) + "\n")
            _run(["qconf", "-Msconf", str(conf)], env, "scheduler configuration")
            daemons.append(subprocess.Popen(["/usr/sbin/sge_execd"], env=dict(env, SGE_ND="1"),
                                            stdout=out, stderr=subprocess.STDOUT))

            def queue_up() -> bool:
                # "tandem.q@localhost BIP 0/0/16 0.50 lx-amd64" and no state (au, E, d).
                lines = subprocess.run(["qstat", "-f", "-q", QUEUE], env=env,
                                       capture_output=True, text=True, timeout=30).stdout
                return any(line.startswith(f"{QUEUE}@") and len(line.split()) == 5
                           for line in lines.splitlines())

            _wait(queue_up, 60, f"the queue {QUEUE} did not come up", log)
        yield SgeCell({k: env[k] for k in ("SGE_ROOT", "SGE_CELL", "SGE_QMASTER_PORT",
                                           "SGE_EXECD_PORT")}, root, [p.pid for p in daemons])
    finally:
        if env and daemons and daemons[0].poll() is None:
            listed = jobs(env)
            if listed:
                subprocess.run(["qdel", "-f", "-u", "*"], env=env, capture_output=True,
                               timeout=30)
                end = time.monotonic() + 15
                while jobs(env) and time.monotonic() < end:
                    time.sleep(0.2)
        # sge_execd stops within a second; sge_qmaster takes about 10 s to
        # stop on its own, which a cell about to be removed need not wait for.
        for p in reversed(daemons):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(daemons):
            try:
                p.wait(timeout=2)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        # Shepherds and jobs outlive an execd that stops; none may outlive the cell.
        for pid in cell_processes(root, set()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(d, ignore_errors=True)
