"""tandem.torch through `tandem launch`: DistributedOptimizer (allreduce in
gradient hooks) and KVStoreOptimizer (parameter server, update on the
workers or on the servers) keep every replica bit-identical after K steps,
start from worker 0's weights whatever each rank drew, overlap
communication with backward (every gradient's reduction starts inside
backward()), and match one process trained on the union of the batches
(tests/system/python_workers/torch_worker.py)."""

from __future__ import annotations

import json
import re

import pytest

from python_job import python_env, worker

DONE = re.compile(r"\[worker (\d+)\] torch_worker: done rank=(\d+) size=(\d+) steps=(\d+) "
                  r"changed=(\w+) max_diff=\S+ sha=(\w+)")
START = re.compile(r"\[worker (\d+)\] torch_worker: start sha=(\w+)")
OVERLAP = re.compile(r"\[worker (\d+)\] torch_worker: overlapped=\[([\d, ]+)\] of (\d+)")


@pytest.mark.parametrize("mode,workers,servers", [("allreduce", 2, 0), ("allreduce", 4, 0),
                                                  ("ps-worker-update", 2, 1),
                                                  ("ps-partitioned", 3, 2),
                                                  ("ps-server-update", 3, 2),
                                                  ("ps-overlap", 3, 2)])
def test_replicas_identical_and_equal_to_one_process(launch, tandem_bin_dir, tmp_path, mode,
                                                     workers, servers):
    """ps-partitioned: KVStoreOptimizer(partition_bytes=192), so the 16 x 16
    layer travels as 5 keys and the 10 x 16 one as 3, cut over 2 servers
    (MXNET_KVSTORE_BIGARRAY_BOUND=20) in the balanced placement.
    ps-overlap: KVStoreOptimizer(overlap_forward=model): step() returns
    with every update in flight, each applied when the next forward pass
    reaches its layer (a span per layer and step on each worker's "forward"
    track of the timeline), and the parameters are still the reference's."""
    steps = 5
    extra = ["--no-scheduler"] if servers == 0 else []
    args = ["--mode", mode, "--steps", str(steps)]
    env = {}
    if mode == "ps-overlap":
        args = ["--mode", "ps-worker-update", "--steps", str(steps), "--overlap-forward"]
        env = {"TANDEM_TIMELINE": str(tmp_path / "trace.json")}
    if mode == "ps-partitioned":
        args = ["--mode", "ps-worker-update", "--steps", str(steps), "--partition-bytes", "192"]
        env = {"MXNET_KVSTORE_BIGARRAY_BOUND": "20", "TANDEM_KV_PLACEMENT": "balanced"}
    result = launch(workers, servers, worker("torch_worker.py") + args, extra_args=extra,
                    env=env, launcher_env=python_env(tandem_bin_dir), timeout=240)
    assert result.returncode == 0, result.job.describe()
    done = DONE.findall(result.output)
    assert sorted(int(d[1]) for d in done) == list(range(workers)), result.output
    for tag, rank, size, k, changed, _ in done:
        assert tag == rank and int(size) == workers and int(k) == steps
        assert changed == "True"
    # Bit-identical replicas, at the start and after K steps.
    assert len({d[5] for d in done}) == 1, done
    starts = START.findall(result.output)
    assert len(starts) == workers and len({s[1] for s in starts}) == 1, starts
    if mode == "ps-overlap":
        # step() left all 6 parameters' updates in flight.
        assert re.findall(r"torch_worker: in flight after the last step=(\d+)",
                          result.output) == ["6"] * workers, result.output
        # Steps 2..5 each found the 3 layers' updates in flight.
        trace = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
        forward = {(e["pid"], e["tid"]) for e in trace
                   if e.get("ph") == "M" and e.get("name") == "thread_name"
                   and e["args"]["name"] == "forward"}
        spans = [e for e in trace if e.get("ph") == "X" and (e["pid"], e["tid"]) in forward]
        assert len({pid for pid, _ in forward}) == workers, forward
        assert len(spans) == workers * 3 * (steps - 1), spans
        assert all(re.fullmatch(r"update Linear \(\d\.weight, \d\.bias\)", e["name"])
                   for e in spans), spans
        for rank in range(workers):
            for what in ("stale", "server", "owner"):
                assert f"[worker {rank}] torch_worker: misuse overlap {what}: " in \
                    result.output, (rank, what, result.output)
    if mode == "ps-partitioned":
        keys = re.findall(r"torch_worker: keys=(\d+)", result.output)
        assert keys == ["12"] * workers, keys  # 3 + 1 + 5 + 1 + 1 + 1
    # Every gradient's communication started inside backward(), every step.
    for tag, counts, params in OVERLAP.findall(result.output):
        assert [int(c) for c in counts.split(",")] == [int(params)] * steps, (tag, counts)
    assert len(OVERLAP.findall(result.output)) == workers
    for rank in range(workers):
        assert (f"[worker {rank}] torch_worker: misuse second backward: the gradient of "
                in result.output), result.output
        assert f"[worker {rank}] torch_worker: misuse zero_grad: zero_grad() while" in \
            result.output


def test_autotune_under_training_keeps_the_replicas_exact(launch, tandem_bin_dir, tmp_path):
    """`tandem launch --autotune`: DistributedOptimizer(negotiate=True)
    trains while rank 0 walks every candidate fusion threshold, cycle time
    and algorithm (1 warm-up sample, then twice 6 + 5 + 3, 2 steps each); the
    parameters still equal the single-process reference (rtol 1e-5) and are
    bit-identical across ranks, every rank ends with rank 0's choice in
    force, and rank 0 wrote the CSV log and logged how to reuse the choice."""
    workers, steps = 3, 60
    log = tmp_path / "autotune.csv"
    result = launch(workers, 0, worker("torch_worker.py") +
                    ["--mode", "allreduce", "--steps", str(steps), "--negotiate"],
                    extra_args=["--no-scheduler", "--autotune", "--autotune-log-file", str(log)],
                    env={"HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "1",
                         "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "2"},
                    launcher_env=python_env(tandem_bin_dir), timeout=240)
    assert result.returncode == 0, result.job.describe()
    done = DONE.findall(result.output)
    assert sorted(int(d[1]) for d in done) == list(range(workers)), result.output
    assert len({d[5] for d in done}) == 1, done
    engines = re.findall(r"torch_worker: engine rank=(\d+) threshold=(\d+) cycle_ms=([\d.]+) "
                         r"algorithm=(\w+) autotune_done=(\w+) samples=(\d+)", result.output)
    assert sorted(int(e[0]) for e in engines) == list(range(workers)), result.output
    by_rank = {int(e[0]): e for e in engines}
    assert by_rank[0][4:] == ("True", "28"), by_rank[0]
    assert len({e[1:4] for e in engines}) == 1, engines  # rank 0's choice everywhere
    rows = log.read_text().splitlines()
    assert rows[0].startswith("sample,phase,"), rows
    phases = [r.split(",")[1] for r in rows[1:]]
    assert phases == (["warmup"] + ["fusion_threshold"] * 12 + ["cycle_time"] * 10 +
                      ["algorithm"] * 6 + ["chosen"]), rows
    # Each knob's candidates in the mirrored order: A B C C B A.
    thresholds = [r.split(",")[2] for r in rows[2:14]]
    assert thresholds == thresholds[::-1] and len(set(thresholds)) == 6, thresholds
    chosen = rows[-1].split(",")
    assert (chosen[2], chosen[4]) == (by_rank[0][1], by_rank[0][3]), (chosen, by_rank[0])
    assert re.search(r"autotune: chose fusion threshold \d+ B, .* to reuse it: "
                     r"TANDEM_FUSION_THRESHOLD=\d+ TANDEM_CYCLE_TIME=", result.output), \
        result.output


# The worker's model: Linear(10, 16), Linear(16, 16), Linear(16, 3).
PARAMETERS = 10 * 16 + 16 + 16 * 16 + 16 + 16 * 3 + 3
BIASES = 16 + 16 + 3


def powersgd_floats(rank: int) -> int:
    """P and Q of each weight [n, m] at rank r = min(n, m, rank), every
    weight compressed (--powersgd-min-rate 0), plus the biases whole."""
    total = BIASES
    for n, m in ((16, 10), (16, 16), (3, 16)):
        r = min(n, m, rank)
        total += (n + m) * r
    return total


@pytest.mark.parametrize("compression,feedback,workers", [("none", False, 2), ("fp16", False, 2),
                                                          ("bf16", True, 3)])
def test_compressed_gradients(launch, tandem_bin_dir, compression, feedback, workers):
    """DistributedOptimizer(compression=...): the replicas stay bit-identical,
    the parameters follow a reference that compresses each rank's gradient
    the same way (with error feedback when asked), and one step's gradients
    take 2 bytes per parameter on the wire compressed, 4 not."""
    args = ["--mode", "allreduce", "--steps", "5", "--compression", compression]
    if feedback:
        args.append("--error-feedback")
    result = launch(workers, 0, worker("torch_worker.py") + args, extra_args=["--no-scheduler"],
                    launcher_env=python_env(tandem_bin_dir), timeout=240)
    assert result.returncode == 0, result.job.describe()
    done = DONE.findall(result.output)
    assert sorted(int(d[1]) for d in done) == list(range(workers)), result.output
    assert len({d[5] for d in done}) == 1, done
    wire = re.findall(r"\[worker \d+\] torch_worker: wire_bytes_per_step=(\d+)", result.output)
    per_parameter = 4 if compression == "none" else 2
    assert [int(w) for w in wire] == [PARAMETERS * per_parameter] * workers, wire


def run_allreduce_worker(launch, tandem_bin_dir, workers: int, args: list[str]):
    """Runs torch_worker.py --mode allreduce with `args` on `workers` ranks
    and checks what every such run must show: every rank done, its
    parameters changed, the replicas bit-identical. Returns (output, each
    rank's wire_bytes_per_step)."""
    result = launch(workers, 0, worker("torch_worker.py") + ["--mode", "allreduce"] + args,
                    extra_args=["--no-scheduler"], launcher_env=python_env(tandem_bin_dir),
                    timeout=240)
    assert result.returncode == 0, result.job.describe()
    done = DONE.findall(result.output)
    assert sorted(int(d[1]) for d in done) == list(range(workers)), result.output
    assert all(d[4] == "True" for d in done), done
    assert len({d[5] for d in done}) == 1, done
    wire = re.findall(r"\[worker \d+\] torch_worker: wire_bytes_per_step=(\d+)", result.output)
    return result.output, [int(w) for w in wire]


@pytest.mark.parametrize("kind,threshold,workers", [("2bit", 0.05, 2), ("2bit", 0.02, 4),
                                                   ("1bit", 0.0, 3)])
def test_quantized_gradients(launch, tandem_bin_dir, kind, threshold, workers):
    """DistributedOptimizer(compression=TwoBit/OneBit(...)): the replicas
    stay bit-identical, the parameters follow a reference that quantises
    every rank's gradient with its residual by docs/gradient-compression.md
    (written in the worker, not tandem's code) and averages them, and one
    step sends each tensor's whole 32-bit words: 16 values per word (2bit)
    or 32 (1bit)."""
    output, wire = run_allreduce_worker(launch, tandem_bin_dir, workers,
                                        ["--steps", "5", "--compression", kind, "--threshold",
                                         str(threshold)])
    per_word = 16 if kind == "2bit" else 32
    sizes = (10 * 16, 16, 16 * 16, 16, 16 * 3, 3)
    assert wire == [sum(4 * -(-n // per_word) for n in sizes)] * workers, wire
    # Calls quantisation cannot serve raise InvalidArgument saying why.
    misuses = ["allreduce", "op", "negotiate", "dtype", "size"] + (["join"] if kind == "1bit"
                                                                    else [])
    for rank in range(workers):
        for what in misuses:
            assert f"[worker {rank}] torch_worker: misuse quantized {what}: " in output, \
                (rank, what, output)


@pytest.mark.parametrize("backend,workers,servers", [("gloo", 2, 1), ("tandem", 3, 2)])
def test_ddp_hook_sums_on_the_servers(launch, tandem_bin_dir, backend, workers, servers):
    """tandem.torch.kvstore_hook: an unchanged DDP loop (on gloo, or on the
    tandem backend beside the store's node) whose buckets the servers sum.
    DDP's buckets before and after its rebuild, each cut into 128 KiB
    partitions, take 8 + 16 + 8 + 1 keys; every rank's parameters equal
    one process trained on the union of the batches (rtol 1e-5), and the
    replicas are bit-identical (python_workers/ddp_server_hook_worker.py)."""
    result = launch(workers, servers, worker("ddp_server_hook_worker.py") +
                    ["--backend", backend], launcher_env=python_env(tandem_bin_dir),
                    timeout=240)
    assert result.returncode == 0, result.job.describe()
    done = re.findall(r"\[worker (\d+)\] ddp_server_hook: done rank=(\d+) size=(\d+) "
                      r"keys=(\d+) sha=(\w+)", result.output)
    assert sorted(int(d[1]) for d in done) == list(range(workers)), result.output
    assert all(d[0] == d[1] and int(d[2]) == workers and d[3] == "33" for d in done), done
    assert len({d[4] for d in done}) == 1, done


@pytest.mark.parametrize("rank,start,workers", [(16, 0, 3), (1, 2, 2)])
def test_powersgd(launch, tandem_bin_dir, rank, start, workers):
    """DistributedOptimizer(compression=PowerSGD(...)): at a rank that covers
    every weight the projection is exact, so the parameters equal the
    uncompressed single-process reference (rtol 1e-5); at rank 1 the
    replicas stay bit-identical and a step sends the factors' bytes: P and
    Q of each weight, the biases whole."""
    _, wire = run_allreduce_worker(launch, tandem_bin_dir, workers,
                                   ["--steps", "5", "--compression", "powersgd",
                                    "--powersgd-rank", str(rank), "--powersgd-start", str(start),
                                    "--powersgd-min-rate", "0"])
    assert wire == [4 * powersgd_floats(rank)] * workers, wire


EPOCH = re.compile(r"\[worker 0\] epoch (\d+)/(\d+): loss ([0-9.]+) train accuracy ([0-9.]+)%")


@pytest.mark.parametrize("kvstore,compression", [(None, "none"), ("dist_sync", "none"),
                                                 (None, "fp16"), (None, "powersgd")])
def test_the_ddp_example_trains(launch, tandem_bin_dir, kvstore, compression):
    """examples/pytorch_ddp/train.py, shortened: the loss falls over 3 epochs
    (with float16 gradients and PowerSGD's rank-2 factors too)."""
    from python_job import PYTHON
    from pathlib import Path
    script = Path(__file__).resolve().parents[2] / "examples" / "pytorch_ddp" / "train.py"
    args = [PYTHON, str(script), "--epochs", "3", "--samples", "512", "--compression", compression]
    if kvstore:
        args += ["--kvstore", kvstore]
    result = launch(2, 1 if kvstore else 0, args,
                    extra_args=[] if kvstore else ["--no-scheduler"],
                    launcher_env=python_env(tandem_bin_dir), timeout=240)
    assert result.returncode == 0, result.job.describe()
    epochs = EPOCH.findall(result.output)
    assert [int(e[0]) for e in epochs] == [1, 2, 3], result.output
    losses = [float(e[2]) for e in epochs]
    assert losses[2] < losses[0], losses


def test_an_unknown_compression_stops_before_training(launch, tandem_bin_dir):
    from python_job import PYTHON
    from pathlib import Path
    script = Path(__file__).resolve().parents[2] / "examples" / "pytorch_ddp" / "train.py"
    result = launch(2, 0, [PYTHON, str(script), "--compression", "zip"],
                    extra_args=["--no-scheduler"], launcher_env=python_env(tandem_bin_dir),
                    timeout=120)
    assert result.returncode != 0
    assert ("unknown gradient compression 'zip': tandem.torch knows none, fp16, bf16"
            in result.output), result.output
    assert "epoch 1/" not in result.output


def test_a_powersgd_rank_nothing_is_worth_compressing_at_stops_before_training(
        launch, tandem_bin_dir):
    from python_job import PYTHON
    from pathlib import Path
    script = Path(__file__).resolve().parents[2] / "examples" / "pytorch_ddp" / "train.py"
    result = launch(2, 0, [PYTHON, str(script), "--compression", "powersgd",
                           "--powersgd-rank", "512"],
                    extra_args=["--no-scheduler"], launcher_env=python_env(tandem_bin_dir),
                    timeout=120)
    assert result.returncode != 0
    assert re.search(r"PowerSGD rank 512: no parameter is worth compressing at "
                     r"min_compression_rate 2; the largest, '[\w.]+' \[\d+(, \d+)*\], needs "
                     r"rank <= \d+", result.output), result.output
    assert "epoch 1/" not in result.output
