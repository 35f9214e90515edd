#!/usr/bin/python3
"""Samples/s of one data-parallel training step with compressed gradients,
beside DDP on Gloo, in one run (docs/benchmarks.md, "Compressed
gradients"): the same model, batch and synthetic data under

  ddp-gloo        torch DistributedDataParallel on gloo (the baseline),
  tandem          tandem.torch.DistributedOptimizer, gradients as they are,
  tandem-engine   ... negotiate=True: through the framework engine (Horovod's
                  semantics), its default fusion threshold and cycle time,
                  after as many warm-up steps as tandem-autotune's,
  tandem-autotune ... with HOROVOD_AUTOTUNE=1: rank 0 tunes the engine during
                  extra warm-up steps (1 warm-up sample and up to 34 scored
                  ones of --autotune-steps steps), then the timed steps run
                  with its choice (printed as a "# tandem-autotune:" line),
  tandem-fp16     ... compression=Compression.fp16,
  tandem-powersgd ... compression=PowerSGD(rank=R, start_iter=0),
  tandem-2bit     ... compression=TwoBit(threshold=T) (MXNet's 2bit, allgathered),
  tandem-ps-kK    tandem.torch.KVStoreOptimizer over dist_sync: the servers
                  sum, the optimizer runs on the workers; a server beside
                  each worker and K more on spare hosts (BytePS's layout),
                  TANDEM_KV_PLACEMENT=balanced (K = 0, 1, 2, 4),
  tandem-ps-k4-overlap  ... with overlap_forward=model: the next forward
                  pass starts while the last layers' sums are in flight,

alternating, R rounds each; the table gives each one's median samples/s,
step time and ratio to ddp-gloo, and tandem's bytes on the wire per step.

Usage (root: the bed is network namespaces):
  /usr/bin/python3 bench/compressed_training.py --bed-rate 100mbit \\
      [--workers 4] [--model mlp] [--batch-size 8] [--steps 10] [--rounds 2] \\
      [--powersgd-rank 4] [--variants ddp-gloo,tandem,tandem-fp16,tandem-powersgd]
      [--partition-bytes N] [--kv-window BYTES]   (the tandem-ps-kK variants)
Without --bed-rate the ranks run on this machine (tandem launch). On the
bed one rank runs per host under torchrun's variables, with the same-host
copy and the mailbox off (the shaped links carry every byte). Figures are
rank 0's, over the steps after the warm-up steps. The model is
examples/pytorch_ddp/ddp_train.py's `mlp` (5.8M parameters) or `cnn`.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("ddp-gloo", "tandem", "tandem-engine", "tandem-autotune", "tandem-fp16",
            "tandem-powersgd", "tandem-2bit", "tandem-ps-k0",
            "tandem-ps-k1", "tandem-ps-k2", "tandem-ps-k4", "tandem-ps-k4-overlap")


def spare_servers(variant: str) -> int | None:
    """K of tandem-ps-kK[-overlap], else None."""
    m = re.fullmatch(r"tandem-ps-k(\d+)(-overlap)?", variant)
    return int(m.group(1)) if m else None
LINE = re.compile(r"compressed_training: variant=(\S+) samples/s=([0-9.]+) step_ms=([0-9.]+) "
                  r"wire_bytes=(\d+)")


def worker(args: argparse.Namespace) -> None:
    """One rank: trains args.steps timed steps of the variant."""
    import torch
    import torch.distributed as dist
    sys.path.insert(0, str(ROOT / "examples" / "pytorch_ddp"))
    sys.path.insert(0, str(ROOT / "build" / "python"))
    from ddp_train import Cnn, Mlp, timed_steps

    torch.manual_seed(0)
    model = Mlp() if args.model == "mlp" else Cnn()
    wire = lambda: 0  # noqa: E731
    if args.variant == "ddp-gloo":
        dist.init_process_group("gloo")
        rank, workers = dist.get_rank(), dist.get_world_size()
        model = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        barrier = dist.barrier
    elif spare_servers(args.variant) is not None:
        import tandem
        import tandem.torch as tt
        kv = tandem.kvstore.create("dist_sync")
        rank, workers = kv.rank, kv.num_workers
        overlap = args.variant.endswith("-overlap")
        opt = tt.KVStoreOptimizer(kv, model.named_parameters(),
                                  optimizer=torch.optim.SGD(model.parameters(), lr=0.01,
                                                            momentum=0.9),
                                  partition_bytes=args.partition_bytes,
                                  overlap_forward=model if overlap else None)
        barrier = kv.barrier
        # Each worker pushes every gradient and pulls every sum.
        grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        wire = lambda: 2 * grad_bytes  # noqa: E731
    else:
        import tandem
        import tandem.torch as tt
        tandem.init()
        rank, workers = tandem.rank(), tandem.size()
        compression = {"tandem": tt.Compression.none, "tandem-engine": tt.Compression.none,
                       "tandem-autotune": tt.Compression.none,
                       "tandem-fp16": tt.Compression.fp16,
                       "tandem-powersgd": tt.PowerSGD(rank=args.powersgd_rank,
                                                      start_iter=0),
                       "tandem-2bit": tt.TwoBit(threshold=args.threshold)}[args.variant]
        opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                      named_parameters=model.named_parameters(),
                                      compression=compression,
                                      negotiate=args.variant in ("tandem-engine",
                                                                 "tandem-autotune"))
        tt.broadcast_parameters(model.state_dict(), root_rank=0)
        barrier = tandem.barrier
        wire = lambda: opt.wire_bytes_per_step  # noqa: E731
    warmup = args.warmup
    if args.variant in ("tandem-engine", "tandem-autotune"):
        # tandem-autotune's whole search, then its choice; tandem-engine
        # warms up as long, so that only the settings differ.
        warmup += (1 + 2 * 17) * args.autotune_steps + 2
    seconds, _ = timed_steps(model, opt, rank, args.batch_size, warmup, args.steps, barrier)
    if args.variant == "tandem-autotune" and rank == 0:
        st = tandem.engine().stats()
        print(f"compressed_training: autotune done={st['autotune_done']} "
              f"samples={st['autotune_samples']} threshold={st['fusion_threshold']} "
              f"cycle_ms={st['cycle_time_ms']} algorithm={st['algorithm']}", flush=True)
    if getattr(opt, "_overlap", False):
        # The last step's sums are still in flight: they belong to the time.
        overlap_s = opt.last_forward_overlap_s
        start = time.perf_counter()
        opt.synchronize()
        seconds += time.perf_counter() - start
        if rank == 0:
            print(f"compressed_training: overlap_ms={1000 * overlap_s:.1f} (the last forward "
                  "pass beside the step before's communication)", flush=True)
    if rank == 0:
        print(f"compressed_training: variant={args.variant} "
              f"samples/s={args.steps * args.batch_size * workers / seconds:.1f} "
              f"step_ms={1000 * seconds / args.steps:.1f} wire_bytes={wire()}", flush=True)
    if args.variant == "ddp-gloo":
        del model  # before the group (docs/pytorch-backend.md)
        dist.destroy_process_group()
    elif spare_servers(args.variant) is not None:
        kv.close()
    else:
        import tandem
        tandem.shutdown()


def rate_args(bed_rate: str) -> list[str]:
    """netbed_run's link rate; "unshaped" leaves the links as fast as veth."""
    return [] if bed_rate == "unshaped" else ["--rate", bed_rate]


def run(args: argparse.Namespace, variant: str) -> tuple[float, float, int]:
    me = ["/usr/bin/python3", str(Path(__file__).resolve()), "--worker", "--variant", variant,
          "--model", args.model, "--batch-size", str(args.batch_size), "--steps",
          str(args.steps), "--warmup", str(args.warmup), "--powersgd-rank",
          str(args.powersgd_rank), "--partition-bytes", str(args.partition_bytes),
          "--threshold", str(args.threshold), "--autotune-steps", str(args.autotune_steps)]
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(args.bin_dir.parent / "python")}
    if variant == "tandem-autotune":
        env.update({"HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "1",
                    "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": str(args.autotune_steps)})
        if args.autotune_log:
            env["TANDEM_AUTOTUNE_LOG"] = str(Path(args.autotune_log).resolve())
    spare = spare_servers(variant)
    if spare is not None:
        # Every process of the job runs this; the scheduler and the servers
        # become tandem's own.
        me = ["sh", "-c", 'case "$DMLC_ROLE" in worker) exec "$@" ;; '
              f'*) exec {args.bin_dir / "tandem"} "$DMLC_ROLE" ;; esac', "sh", *me]
        env["TANDEM_KV_PLACEMENT"] = "balanced"
        # Every partition (at least partition_bytes) is cut over the servers
        # in the balanced shares; the small tensors stay whole.
        env["MXNET_KVSTORE_BIGARRAY_BOUND"] = str(max(1, args.partition_bytes // 8))
        if args.kv_window:
            env["TANDEM_KV_INFLIGHT_BYTES"] = str(args.kv_window)
    if args.bed_rate and spare is not None:
        argv = ["/usr/bin/python3", str(ROOT / "bench" / "netbed_run.py"), "--hosts",
                str(args.workers + spare), *rate_args(args.bed_rate), "--timeout", "900",
                "--job", f"{args.workers},{args.workers + spare}", "--layout", "beside-workers"]
        for k, v in env.items():
            argv += ["--env", f"{k}={v}"]
        argv += ["--", *me]
        run_env = {**env, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    elif spare is not None:
        argv = [str(args.bin_dir / "tandem"), "launch", "-n", str(args.workers), "-s",
                str(args.workers + spare), "--command-runs-all-roles", "--", *me]
        run_env = {**env, "PATH": "/usr/bin:/bin"}
    elif args.bed_rate:
        argv = ["/usr/bin/python3", str(ROOT / "bench" / "netbed_run.py"), "--hosts",
                str(args.workers), *rate_args(args.bed_rate), "--timeout", "900",
                "--env", "RANK={rank}", "--env", f"WORLD_SIZE={args.workers}",
                "--env", "MASTER_ADDR=h1", "--env", "MASTER_PORT=29500",
                "--env", "TANDEM_COLLECTIVE_SAME_HOST_COPY=0",
                "--env", "TANDEM_COLLECTIVE_MAILBOX=0"]
        for k, v in env.items():
            argv += ["--env", f"{k}={v}"]
        argv += ["--", *me]
        run_env = {**env, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    else:
        argv = [str(args.bin_dir / "tandem"), "launch", "-n", str(args.workers),
                "--no-scheduler", "--", *me]
        run_env = {**env, "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(argv, capture_output=True, text=True, env=run_env, timeout=1000)
    m = LINE.search(proc.stdout)
    if proc.returncode != 0 or not m:
        sys.exit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    for note in (r"compressed_training: overlap_ms=\S+ .*", r"compressed_training: autotune .*"):
        found = re.search(note, proc.stdout)
        if found:
            print(f"# {variant}: {found.group(0)}", flush=True)
    return float(m.group(2)), float(m.group(3)), int(m.group(4))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin-dir", type=Path, default=ROOT / "build" / "bin")
    parser.add_argument("--bed-rate", help="one rank per host of a bed at this link rate "
                                           "(tc's form, e.g. 100mbit; or unshaped)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--powersgd-rank", type=int, default=4)
    parser.add_argument("--autotune-steps", type=int, default=5,
                        help="steps per autotune sample (tandem-autotune)")
    parser.add_argument("--autotune-log", help="tandem-autotune: rank 0's CSV of every sample "
                                               "(rewritten by each round)")
    parser.add_argument("--threshold", type=float, default=0.001,
                        help="tandem-2bit: TwoBit's threshold (about the mean |gradient| of "
                             "the MLP's large layers)")
    parser.add_argument("--partition-bytes", type=int, default=4096000,
                        help="tandem-ps-kK: KVStoreOptimizer's partition_bytes")
    parser.add_argument("--kv-window", type=int, default=0,
                        help="TANDEM_KV_INFLIGHT_BYTES of the tandem-ps-kK variants "
                             "(0: tandem's default)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    variants = args.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            parser.error(f"unknown variant {v!r}: one of {', '.join(VARIANTS)}")
    got: dict[str, list[tuple[float, float, int]]] = {v: [] for v in variants}
    for _ in range(args.rounds):
        for v in variants:
            got[v].append(run(args, v))
    where = f"{args.workers} hosts at {args.bed_rate}" if args.bed_rate else \
        f"{args.workers} ranks on this machine"
    print(f"# {args.model}, batch {args.batch_size} per rank, {where}, {args.steps} steps, "
          f"medians of {args.rounds} rounds; PowerSGD rank {args.powersgd_rank}")
    print("| variant | samples/s | step ms | vs ddp-gloo | tandem's wire bytes/step |")
    print("|---|---|---|---|---|")
    base = statistics.median(s for s, _, _ in got["ddp-gloo"]) if "ddp-gloo" in got else None
    for v in variants:
        sps = statistics.median(s for s, _, _ in got[v])
        ms = statistics.median(t for _, t, _ in got[v])
        ratio = f"{sps / base:.2f}x" if base else "-"
        wire = str(got[v][0][2]) if v != "ddp-gloo" else "-"
        print(f"| {v} | {sps:.1f} | {ms:.1f} | {ratio} | {wire} |", flush=True)


if __name__ == "__main__":
    main()
