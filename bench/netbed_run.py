#!/usr/bin/python3
"""Runs commands on a multi-host bed (tests/system/netbed.py) at a stated link
rate and loss, for benchmarks and experiments; removes the bed afterwards
however the run ends. Needs root (network namespaces). docs/netbed.md.

Two modes:

  # the same command on every host ({host}, {index}, {ip}, {hosts} are
  # replaced: the host's name, 1-based index, IPv4 address, all names)
  bench/netbed_run.py --hosts 4 --rate 1gbit -- sh -c 'echo {host} {ip}'

  # a tandem job: the scheduler on h1, servers on the next hosts, workers
  # round-robin over all hosts; every process gets the plain DMLC environment
  # (scheduler addressed as h1) and runs the command (a program that serves
  # the scheduler and server roles itself, through tandem::ServeAssignedRole)
  bench/netbed_run.py --hosts 5 --rate 1gbit --loss 1 --job 4,2 \\
      --env PS_RESEND=1 -- build/bin/kv_rounds --rounds 200

Every process's output is printed with a "[h2 worker 1]" prefix once it
ends; the exit code is 0 when every process exited 0, else the first
non-zero code. --timeout bounds the run (then everything is killed, exit 124).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "system"))

import netbed  # noqa: E402
from bed_job import BedJob  # noqa: E402


def placement(hosts: int, workers: int, servers: int) -> list[tuple[int, str]]:
    """Scheduler on h1, server i on host 2 + i (wrapping), worker i on host 1 + i % hosts."""
    out = [(1, "scheduler")]
    out += [((1 + i) % hosts + 1, "server") for i in range(servers)]
    out += [(i % hosts + 1, "worker") for i in range(workers)]
    return out


def parse_env(items: list[str]) -> dict[str, str]:
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"netbed_run: --env takes KEY=VALUE, got {item!r}")
        env[key] = value
    return env


def run_everywhere(bed: netbed.NetBed, command: list[str], env: dict[str, str],
                   timeout: float) -> int:
    names = " ".join(h.name for h in bed.hosts)
    procs = []
    for h in bed.hosts:
        argv = [a.format(host=h.name, index=h.index, ip=h.ip, hosts=names) for a in command]
        full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
        procs.append((h, bed.popen(h, argv, env=full_env)))
    end = time.monotonic() + timeout
    code = 0
    for h, p in procs:
        try:
            rc = p.wait(timeout=max(0.0, end - time.monotonic()))
        except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: stop everything
            print(f"netbed_run: timed out after {timeout} s", file=sys.stderr)
            return 124
        print(f"netbed_run: {h.name} exited {rc}", file=sys.stderr)
        code = code or rc
    return code


def run_job(bed: netbed.NetBed, command: list[str], env: dict[str, str], workers: int,
            servers: int, timeout: float) -> int:
    job = BedJob(bed, placement(len(bed.hosts), workers, servers), command, env=env)
    finished = job.wait_all(timeout)
    for p in job.procs:
        for line in p.output.splitlines():
            print(f"[{p.host.name} {p.role}{'' if p.rank() is None else ' ' + str(p.rank())}] "
                  f"{line}")
    if not finished:
        print(f"netbed_run: the job did not finish in {timeout} s", file=sys.stderr)
        job.stop()
        return 124
    codes = [p.returncode for p in job.procs]
    return next((c for c in codes if c != 0), 0)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description="Run a command on every host of a network-namespace bed, or a tandem job "
                    "across it, at a stated link rate and loss.")
    parser.add_argument("--hosts", type=int, default=4, help="number of hosts (default 4)")
    parser.add_argument("--rate", help='tc tbf rate of every link, e.g. "1gbit"')
    parser.add_argument("--loss", type=float, help="percent of bridged frames to drop")
    parser.add_argument("--job", metavar="W,S",
                        help="run a tandem job of W workers and S servers (plus the scheduler)")
    parser.add_argument("--env", action="append", default=[], metavar="K=V",
                        help="environment for every process (repeatable)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds (default 600)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    env = parse_env(args.env)
    try:
        with netbed.NetBed(args.hosts, rate=args.rate, loss_percent=args.loss) as bed:
            print(f"netbed_run: {len(bed.hosts)} hosts, rate {args.rate or 'unshaped'}, "
                  f"loss {args.loss or 0}%", file=sys.stderr)
            if args.job:
                workers, _, servers = args.job.partition(",")
                code = run_job(bed, command, env, int(workers), int(servers or 0), args.timeout)
            else:
                code = run_everywhere(bed, command, env, args.timeout)
            if args.loss:
                print(f"netbed_run: {bed.dropped_packets()} frames dropped", file=sys.stderr)
            return code
    except netbed.BedUnavailable as e:
        print(f"netbed_run: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
