"""Recovery from a killed worker: tandem's elastic run against torchrun's
restart, side by side in one run (docs/benchmarks.md, "Elastic recovery").

Usage: /usr/bin/python3 bench/elastic_recovery.py [--bin-dir build/bin]
           [--workers 3] [--steps 400] [--kill-at 25] [--victim 1]
           [--checkpoint-every 10] [--rounds 3] [--torchrun-monitor-interval S]

Both run bench/elastic_recovery_worker.py, the same MLP and data, W workers
on this machine; worker --victim SIGKILLs itself before step --kill-at of
its first run:

 - tandem: `tandem launch -s 0 --workers W-1:W --max-restarts 1
   --restart-delay 0`; the survivors regroup and go on, the launcher's
   replacement joins at a commit (docs/elastic.md).
 - torchrun: `torchrun --standalone --nnodes 1 --nproc_per_node W
   --max_restarts 1` (torch 1.13's elastic agent; --monitor_interval its
   default unless given), DDP on gloo, a checkpoint every
   --checkpoint-every steps; the agent restarts every worker, which resume
   from the checkpoint.

Per runtime, medians over the rounds (alternating): the pause (from the
kill to the first step any worker completes after it), the time until all
W workers train again, the steps done again (completed before the kill and
redone after), and the whole run's wall time.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "bench" / "elastic_recovery_worker.py"
LINE = re.compile(r"recovery: (kill )?worker (\d+) step (\d+) t ([0-9.]+)")


def command(runtime: str, args: argparse.Namespace, checkpoint_dir: str) -> list[str]:
    script = ["/usr/bin/python3", str(WORKER), "--runtime", runtime, "--steps", str(args.steps),
              "--kill-at", str(args.kill_at), "--victim", str(args.victim)]
    if runtime == "tandem":
        return [str(args.bin_dir / "tandem"), "launch", "-s", "0", "--workers",
                f"{args.workers - 1}:{args.workers}", "--max-restarts", "1", "--restart-delay",
                "0", "--", *script]
    # torch 1.13's Std.from_str returns None for its defaults ("0") under
    # Python 3.11, which torchrun then fails on; a map naming a local rank
    # that does not exist (9) gives every rank the default (no redirection).
    argv = ["/usr/bin/torchrun", "--standalone", "--nnodes", "1", "--nproc_per_node",
            str(args.workers), "--max_restarts", "1", "--redirects", "9:1", "--tee", "9:1"]
    if args.torchrun_monitor_interval is not None:
        argv += ["--monitor_interval", str(args.torchrun_monitor_interval)]
    return argv + [str(WORKER)] + script[2:] + [
        "--checkpoint-dir", checkpoint_dir, "--checkpoint-every", str(args.checkpoint_every)]


def measure(runtime: str, args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="elastic-recovery-") as checkpoint_dir:
        env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
               "PYTHONPATH": str(args.bin_dir.parent / "python")}
        start = time.monotonic()
        proc = subprocess.run(command(runtime, args, checkpoint_dir), capture_output=True,
                              text=True, env=env, timeout=600)
        wall = time.monotonic() - start
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        sys.exit(f"{runtime} failed ({proc.returncode}):\n{out}")
    kill_t = None
    steps: list[tuple[int, int, float]] = []
    for m in LINE.finditer(out):
        if m.group(1):
            kill_t = float(m.group(4))
        else:
            steps.append((int(m.group(2)), int(m.group(3)), float(m.group(4))))
    if kill_t is None:
        sys.exit(f"{runtime}: no worker killed itself:\n{out}")
    # A line after the kill counts as training again when its step is at or
    # past the victim's, or when its worker went back (a restarted process
    # redoing steps); a survivor's line that only finishes a step begun
    # before the kill continues what was done before.
    done: list[int] = []
    after: list[tuple[int, int, float]] = []
    last: dict[int, int] = {}
    for w, s, t in sorted(steps, key=lambda x: x[2]):
        if t > kill_t and (s >= args.kill_at or s <= last.get(w, -1)):
            after.append((w, s, t))
        elif not after or all(a[0] != w for a in after):
            done.append(s)
        last[w] = s
    if not after:
        sys.exit(f"{runtime}: no step after the kill:\n{out}")
    first = min(after, key=lambda x: x[2])
    back: dict[int, float] = {}
    for w, _, t in after:
        back[w] = min(back.get(w, t), t)
    if len(back) < args.workers:
        sys.exit(f"{runtime}: only workers {sorted(back)} trained after the kill:\n{out}")
    done_before = max(done) + 1
    resumed_from = min(s for _, s, _ in after)
    return {"pause": first[2] - kill_t, "all": max(back.values()) - kill_t,
            "redone": done_before - resumed_from, "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin-dir", type=Path, default=ROOT / "build" / "bin")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--kill-at", type=int, default=25)
    parser.add_argument("--victim", type=int, default=1)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--torchrun-monitor-interval", type=float,
                        help="torchrun's --monitor_interval (default: torchrun's own, 5 s)")
    args = parser.parse_args()
    got: dict[str, list[dict[str, float]]] = {"tandem": [], "torchrun": []}
    for _ in range(args.rounds):
        for runtime in got:
            got[runtime].append(measure(runtime, args))
    print(f"{args.workers} workers, worker {args.victim} killed before step {args.kill_at} of "
          f"{args.steps}; torchrun checkpoints every {args.checkpoint_every} steps; median of "
          f"{args.rounds} rounds")
    print("| runtime | pause after the kill (s) | until all workers train (s) | steps redone | "
          "whole run (s) |")
    print("|---|---|---|---|---|")
    for runtime, runs in got.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        spread = ", ".join(f"{r['pause']:.3f}" for r in runs)
        print(f"| {runtime} | {med['pause']:.3f} ({spread}) | {med['all']:.3f} | "
              f"{med['redone']:g} | {med['wall']:.2f} |")


if __name__ == "__main__":
    main()
