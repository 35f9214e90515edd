"""Call checks through real processes (docs/collectives.md "Call checks"):
jobs of `tandem launch --no-scheduler` whose Python workers
(python_workers/mismatch_worker.py) make calls their ranks disagree on,
through tandem.* and tandem.torch. Every rank must raise tandem.CallMismatch
within a second, with one message naming every rank's call, and no rank may
return. Between processes the pieces travel through the same-host mailbox,
by reference, and (TANDEM_COLLECTIVE_SAME_HOST_COPY=0) over TCP."""

from __future__ import annotations

import re

import pytest

from python_job import python_env, worker


def others(n: int) -> str:
    return "rank 1" if n == 2 else f"ranks 1-{n - 1}"


# case -> what every rank's message contains, given the worker count.
CASES = {
    "dtype": lambda n: ["allreduce 'layer3.weight': mismatched dtype at operation 1 of "
                        "communicator world", "rank 0 float32 [10]", f"{others(n)} int32 [10]"],
    "order": lambda n: ["call order differs at operation 1 of communicator world",
                        "rank 0 allreduce 'a' float32 [4] sum",
                        f"{others(n)} allreduce 'b' float32 [4] sum"],
    "root": lambda n: ["broadcast 'w': mismatched root", "rank 0 float32 [6] root 0",
                       "rank 1 float32 [6] root 1"],
    "reduction": lambda n: ["allreduce: mismatched reduction", "rank 0 float64 [5] max",
                            f"{others(n)} float64 [5] sum"],
    "count": lambda n: ["allreduce 'grad': mismatched shape", "rank 0 float32 [10]",
                        f"{others(n)} float32 [12]"],
    "allgather_trailing": lambda n: ["allgather 'features': mismatched shape",
                                     f"rank 0 float32 [{2 * n}, 3]",
                                     f"{others(n)} float32 [{2 * n}, 4]"],
    "alltoall_block": lambda n: ["alltoall: mismatched shape", f"rank 0 int64 [{2 * n}]",
                                 f"{others(n)} int64 [{3 * n}]"],
    "reduce_scatter_count": lambda n: ["reduce_scatter: mismatched shape",
                                       f"rank 0 float32 [{2 * n}]",
                                       f"{others(n)} float32 [{5 * n}]"],
    # The first gradient produced (the last layer's) is the first mismatch.
    "torch_model": lambda n: ["allreduce '2.weight': mismatched shape", "rank 0 float32 [3, 17]",
                              f"{others(n)} float32 [3, 16]"],
    # The last layer's bias is the first gradient produced.
    "torch_compression": lambda n: ["allreduce '2.bias': mismatched dtype", "rank 0 float16 [3]",
                                    f"{others(n)} float32 [3]"],
    "torch_broadcast_parameters": lambda n: ["broadcast 'bias': mismatched shape",
                                             "rank 0 float32 [4]", f"{others(n)} float32 [5]"],
}

PATHS = {"samehost": {}, "tcp": {"TANDEM_COLLECTIVE_SAME_HOST_COPY": "0"}}


def run(launch, tandem_bin_dir, case: str, workers: int, env: dict[str, str]):
    extra = ["--no-scheduler"]
    for k, v in env.items():
        extra += ["--env", f"{k}={v}"]
    result = launch(workers, 0, worker("mismatch_worker.py") + ["--case", case],
                    extra_args=extra, launcher_env=python_env(tandem_bin_dir), timeout=120)
    assert result.returncode == 0, result.job.describe()
    assert "returned" not in result.output, result.output
    found = re.findall(r"\[worker (\d+)\] mismatch_worker: rank (\d+) raised (\w+) after "
                       r"([0-9.]+) s: (.*)", result.output)
    assert sorted(int(f[1]) for f in found) == list(range(workers)), result.output
    return found


# Each case on one path, the paths alternating (the unit tests run every case
# on both, over threads); dtype on both.
@pytest.mark.parametrize("case,workers,path", [
    ("dtype", 3, "samehost"), ("dtype", 3, "tcp"), ("order", 2, "tcp"), ("root", 4, "samehost"),
    ("reduction", 5, "tcp"), ("count", 3, "samehost"), ("allgather_trailing", 3, "tcp"),
    ("alltoall_block", 2, "samehost"), ("reduce_scatter_count", 4, "tcp"),
    ("torch_model", 2, "samehost"), ("torch_compression", 3, "tcp"),
    ("torch_broadcast_parameters", 3, "tcp"),
])
def test_every_rank_raises_naming_every_call(launch, tandem_bin_dir, case, workers, path):
    found = run(launch, tandem_bin_dir, case, workers, PATHS[path])
    for _, rank, kind, seconds, message in found:
        assert kind == "CallMismatch", (rank, kind, message)
        for part in CASES[case](workers):
            assert part in message, f"rank {rank}: {part!r} not in {message!r}"
        assert float(seconds) < 1.0, (rank, seconds, message)


@pytest.mark.parametrize("workers", [3, 4])
def test_a_member_in_another_communicator(launch, tandem_bin_dir, workers):
    """Workers 0 and 1 allreduce over the group {0, 1, 2}, worker 2 (and 3)
    over the world: the crossed order is reported on every rank."""
    found = run(launch, tandem_bin_dir, "crossed_groups", workers, {})
    for _, rank, kind, seconds, message in found:
        assert kind == "CallMismatch", (rank, kind, message)
        assert "the ranks call their communicators in different orders" in message, message
        assert float(seconds) < 1.0, (rank, seconds, message)


@pytest.mark.parametrize("negotiate,twobit,workers", [(False, None, 2), (False, None, 3),
                                                     (True, None, 3), (False, 0.05, 3)])
def test_uneven_inputs_join(launch, tandem_bin_dir, negotiate, twobit, workers):
    """Rank r has 3 + r batches: inside DistributedOptimizer.join() the ranks
    that ran out shadow the others' steps; everyone ends with the
    reference's parameters (python_workers/join_worker.py), also with 2bit
    gradients (a shadowing rank's zeros quantise to zeros)."""
    args = (["--negotiate"] if negotiate else []) + \
        (["--twobit", str(twobit)] if twobit else [])
    result = launch(workers, 0, worker("join_worker.py") + args, extra_args=["--no-scheduler"],
                    launcher_env=python_env(tandem_bin_dir), timeout=120)
    assert result.returncode == 0, result.job.describe()
    found = re.findall(r"join_worker: ok rank=(\d+) size=(\d+) shadowed=(\d+) digest=(\w+)",
                       result.output)
    assert sorted(int(f[0]) for f in found) == list(range(workers)), result.output
    for rank, size, shadowed, _ in found:
        assert int(shadowed) == workers - 1 - int(rank), (rank, shadowed)
    assert len({f[3] for f in found}) == 1, found


def test_engine_takes_any_order(launch, tandem_bin_dir):
    result = launch(3, 0, worker("engine_worker.py") + ["--mode", "order"],
                    extra_args=["--no-scheduler"], launcher_env=python_env(tandem_bin_dir),
                    timeout=120)
    assert result.returncode == 0, result.job.describe()
    assert len(re.findall(r"engine_worker: ok rank=\d+ size=3", result.output)) == 3, \
        result.output


def test_engine_reports_a_stall_naming_tensor_and_ranks(launch, tandem_bin_dir):
    extra = ["--no-scheduler", "--env", "TANDEM_STALL_WARNING_SECONDS=1",
             "--env", "TANDEM_STALL_SHUTDOWN_TIME_SECONDS=3"]
    result = launch(3, 0, worker("engine_worker.py") + ["--mode", "stall"], extra_args=extra,
                    launcher_env=python_env(tandem_bin_dir), timeout=120)
    assert result.returncode == 0, result.job.describe()
    # The warning, on every rank, names the tensor and the missing ranks.
    for rank in range(3):
        assert re.search(rf"\[worker {rank}\].*tensor 'c' \(.*\) stalled for [0-9.]+ s: "
                         r"submitted by rank\(s\) 0, missing on rank\(s\) 1, 2", result.output), \
            result.output
    assert "engine_worker: rank 0: 'c' failed:" in result.output, result.output
    assert len(re.findall(r"engine_worker: ok rank=\d+ size=3 stalls_reported=[1-9]",
                          result.output)) == 3, result.output
