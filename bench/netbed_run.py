#!/usr/bin/python3
"""Runs commands on a multi-host bed (tests/system/netbed.py) at a stated link
rate and loss, for benchmarks and experiments; removes the bed afterwards
however the run ends. Needs root (network namespaces). docs/netbed.md.

Two modes:

  # the same command on every host ({host}, {index}, {rank}, {ip}, {hosts}
  # are replaced in the command and in --env values: the host's name, its
  # 1-based index, index - 1, its IPv4 address, all names); e.g. a
  # collectives job under the torchrun contract, one rank per host:
  bench/netbed_run.py --hosts 4 --rate 1gbit -- sh -c 'echo {host} {ip}'
  bench/netbed_run.py --hosts 4 --rate 1gbit --env RANK={rank} --env WORLD_SIZE=4 \
      --env MASTER_ADDR=h1 --env MASTER_PORT=29500 -- build/bin/collective_bench \
      --op allreduce --min-bytes 64M --max-bytes 64M

  # the bed's ceiling: one TCP stream from h1 to h2 for SECONDS, its payload
  # rate in GB/s (10^9 bytes a second)
  bench/netbed_run.py --hosts 4 --rate 1gbit --stream 10
  # a ring's ceiling: every host streams to the next at once (each link
  # carries one stream's data and the acknowledgements of another)
  bench/netbed_run.py --hosts 4 --rate 1gbit --ring-streams 10

  # a tandem job: the scheduler on h1, servers on the next hosts, workers
  # round-robin over all hosts; every process gets the plain DMLC environment
  # (scheduler addressed as h1) and runs the command (a program that serves
  # the scheduler and server roles itself, through tandem::ServeAssignedRole)
  bench/netbed_run.py --hosts 5 --rate 1gbit --loss 1 --job 4,2 \\
      --env PS_RESEND=1 -- build/bin/kv_rounds --rounds 200
  # BytePS's layout: a server beside each worker and 2 on spare hosts (h5, h6)
  bench/netbed_run.py --hosts 6 --rate 100mbit --job 4,6 --layout beside-workers \\
      --env TANDEM_KV_PLACEMENT=balanced -- build/bin/kv_rounds --rounds 20

Every process's output is printed with a "[h2 worker 1]" prefix once it
ends; the exit code is 0 when every process exited 0, else the first
non-zero code. --timeout bounds the run (then everything is killed, exit 124).
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
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


def placement_beside_workers(hosts: int, workers: int, servers: int) -> list[tuple[int, str]]:
    """BytePS's layout: worker i on host 1 + i, server i < workers beside it,
    the other servers on hosts of their own after the workers' (spare
    servers), the scheduler on h1."""
    spare = max(0, servers - workers)
    if workers > hosts or workers + spare > hosts:
        raise SystemExit(f"netbed_run: --layout beside-workers with {workers} workers and "
                         f"{servers} servers needs {workers + spare} hosts, the bed has {hosts}")
    out = [(1, "scheduler")]
    out += [(1 + i if i < workers else 1 + workers + (i - workers), "server")
            for i in range(servers)]
    out += [(1 + i, "worker") for i in range(workers)]
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
    # One job secret for every host's process, as `tandem launch` would give
    # (a tandem process refuses to start without one; docs/security.md).
    secret = secrets.token_hex(32)
    procs = []
    for h in bed.hosts:
        fields = dict(host=h.name, index=h.index, rank=h.index - 1, ip=h.ip, hosts=names)
        argv = [a.format(**fields) for a in command]
        full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TANDEM_SECRET": secret,
                    **{k: v.format(**fields) for k, v in env.items()}}
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


# One TCP stream: the receiver counts what arrives for the given seconds
# after the first byte and prints it; the sender writes 1 MiB buffers.
_STREAM_RECEIVER = """
import socket, sys, time
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", 5201)); srv.listen(1); print("ready", flush=True)
conn, _ = srv.accept(); buf = bytearray(1 << 20); view = memoryview(buf)
n = conn.recv_into(view); start = time.monotonic(); total = 0
while time.monotonic() - start < float(sys.argv[1]):
    n = conn.recv_into(view)
    if n == 0: break
    total += n
print(f"{total / (time.monotonic() - start) / 1e9:.4f}", flush=True)
"""
_STREAM_SENDER = """
import socket, sys
s = socket.create_connection((sys.argv[1], 5201)); data = bytes(1 << 20)
try:
    while True: s.sendall(data)
except OSError:
    pass
"""


def measure_stream(bed: netbed.NetBed, seconds: float) -> float:
    """GB/s of payload one TCP stream moves from h1 to h2 over `seconds`."""
    receiver = bed.popen(bed.host(2), [sys.executable, "-c", _STREAM_RECEIVER, str(seconds)],
                         stdout=subprocess.PIPE, text=True)
    try:
        if receiver.stdout.readline().strip() != "ready":
            raise SystemExit("netbed_run: the stream receiver did not start")
        sender = bed.popen(bed.host(1), [sys.executable, "-c", _STREAM_SENDER, bed.host(2).ip],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            line = receiver.stdout.readline().strip()
        finally:
            sender.kill()
            sender.wait()
        return float(line)
    finally:
        receiver.kill()
        receiver.wait()


def measure_ring(bed: netbed.NetBed, seconds: float) -> list[float]:
    """GB/s of payload each of K TCP streams moves at once, host i -> host
    i+1 (mod K): a ring's traffic, where each link carries one stream's data
    and the acknowledgements of the stream coming the other way. By host."""
    receivers = [bed.popen(h, [sys.executable, "-c", _STREAM_RECEIVER, str(seconds)],
                           stdout=subprocess.PIPE, text=True) for h in bed.hosts]
    senders = []
    try:
        for r in receivers:
            if r.stdout.readline().strip() != "ready":
                raise SystemExit("netbed_run: a stream receiver did not start")
        for i, h in enumerate(bed.hosts):
            right = bed.hosts[(i + 1) % len(bed.hosts)]
            senders.append(bed.popen(h, [sys.executable, "-c", _STREAM_SENDER, right.ip],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        return [float(r.stdout.readline().strip()) for r in receivers]
    finally:
        for p in senders + receivers:
            p.kill()
            p.wait()


def run_job(bed: netbed.NetBed, command: list[str], env: dict[str, str], workers: int,
            servers: int, timeout: float, layout: str = "round-robin") -> int:
    place = placement_beside_workers if layout == "beside-workers" else placement
    job = BedJob(bed, place(len(bed.hosts), workers, servers), command, env=env)
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
    parser.add_argument("--layout", choices=["round-robin", "beside-workers"],
                        default="round-robin",
                        help="--job's placement: round-robin (servers from h2, workers over "
                             "every host) or beside-workers (worker i and server i on host "
                             "i+1, further servers on hosts of their own)")
    parser.add_argument("--env", action="append", default=[], metavar="K=V",
                        help="environment for every process (repeatable)")
    parser.add_argument("--stream", type=float, metavar="SECONDS",
                        help="measure one TCP stream h1 -> h2 for SECONDS instead of a command")
    parser.add_argument("--ring-streams", type=float, metavar="SECONDS",
                        help="measure a ring of TCP streams (every host to the next at once) "
                             "for SECONDS instead of a command")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds (default 600)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command and not args.stream and not args.ring_streams:
        parser.error("give the command after --, or --stream SECONDS, or --ring-streams SECONDS")
    env = parse_env(args.env)
    try:
        with netbed.NetBed(args.hosts, rate=args.rate, loss_percent=args.loss) as bed:
            print(f"netbed_run: {len(bed.hosts)} hosts, rate {args.rate or 'unshaped'}, "
                  f"loss {args.loss or 0}%", file=sys.stderr)
            if args.stream:
                rate = measure_stream(bed, args.stream)
                print(f"one TCP stream h1 -> h2: {rate:.4f} GB/s of payload "
                      f"({rate * 8:.3f} Gbit/s)")
                code = 0
            elif args.ring_streams:
                rates = measure_ring(bed, args.ring_streams)
                print("a ring of TCP streams (host i -> host i+1, all at once), GB/s of payload: "
                      + ", ".join(f"{h.name} {r:.4f}" for h, r in zip(bed.hosts, rates))
                      + f"; slowest {min(rates):.4f}")
                code = 0
            elif args.job:
                workers, _, servers = args.job.partition(",")
                code = run_job(bed, command, env, int(workers), int(servers or 0), args.timeout,
                               args.layout)
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
