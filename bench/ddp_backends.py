"""The same DDP training script (examples/pytorch_ddp/ddp_train.py) on gloo
and on tandem's torch.distributed backend, side by side in one run: the
backends alternate, R rounds each, and the table gives each one's median
samples/s and step time and tandem's ratio to gloo (docs/benchmarks.md,
"torch.distributed: gloo and tandem").

Usage: /usr/bin/python3 bench/ddp_backends.py [--bin-dir build/bin]
           [--workers 2] [--models mlp,cnn] [--batch-size 8] [--steps 30]
           [--rounds 3] [--bed-rate 1gbit]
Each run is `tandem launch -n W --no-scheduler` of the script (torchrun's
variables for env://) on this machine, or with --bed-rate one rank per host
of a bed of W network-namespace hosts at that link rate
(bench/netbed_run.py; root). Figures are rank 0's, over the steps after 5
warm-up steps.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "pytorch_ddp" / "ddp_train.py"
LINE = re.compile(r"ddp_train: backend=(\w+) .* samples/s=([0-9.]+) step_ms=([0-9.]+)")


def run(bin_dir: Path, backend: str, model: str, workers: int, batch: int, steps: int,
        bed_rate: str | None) -> tuple[float, float]:
    script = ["/usr/bin/python3", str(SCRIPT), "--backend", backend, "--model", model,
              "--batch-size", str(batch), "--steps", str(steps)]
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(bin_dir.parent / "python")}
    if bed_rate:
        argv = ["/usr/bin/python3", str(ROOT / "bench" / "netbed_run.py"), "--hosts",
                str(workers), "--rate", bed_rate, "--env", "RANK={rank}", "--env",
                f"WORLD_SIZE={workers}", "--env", "MASTER_ADDR=h1", "--env", "MASTER_PORT=29500"]
        for k, v in env.items():
            argv += ["--env", f"{k}={v}"]
        argv += ["--", *script]
    else:
        argv = [str(bin_dir / "tandem"), "launch", "-n", str(workers), "--no-scheduler", "--",
                *script]
    # The bed's runner needs ip and tc (/usr/sbin); its processes get `env`.
    run_env = {**env, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"} if bed_rate else env
    proc = subprocess.run(argv, capture_output=True, text=True, env=run_env, timeout=600)
    m = LINE.search(proc.stdout)
    if proc.returncode != 0 or not m:
        sys.exit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return float(m.group(2)), float(m.group(3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin-dir", type=Path, default=ROOT / "build" / "bin")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bed-rate", help="run on a bed of --workers hosts at this link rate "
                        "(e.g. 1gbit; needs root)")
    args = parser.parse_args()

    print(f"| model | workers | batch | gloo samples/s | tandem samples/s | tandem/gloo | "
          f"gloo step ms | tandem step ms |")
    print("|---|---|---|---|---|---|---|---|")
    for model in args.models.split(","):
        got: dict[str, list[tuple[float, float]]] = {"gloo": [], "tandem": []}
        for _ in range(args.rounds):
            for backend in ("gloo", "tandem"):
                got[backend].append(run(args.bin_dir, backend, model, args.workers,
                                        args.batch_size, args.steps, args.bed_rate))
        med = {b: (statistics.median(s for s, _ in v), statistics.median(t for _, t in v))
               for b, v in got.items()}
        print(f"| {model} | {args.workers} | {args.batch_size} | {med['gloo'][0]:.1f} | "
              f"{med['tandem'][0]:.1f} | {med['tandem'][0] / med['gloo'][0]:.2f}x | "
              f"{med['gloo'][1]:.1f} | {med['tandem'][1]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
