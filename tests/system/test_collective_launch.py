"""Collectives through `tandem launch` over TCP on loopback: 2 to 5 worker
processes check every operation's result exactly (tests/programs/
collective_check.cc), with worker 0 hosting the rendezvous (--no-scheduler)
or with a scheduler process; kill -9 of one worker makes every other one
raise PeerLost naming it and exit non-zero, and nothing is left behind."""

from __future__ import annotations

import re
import time

import pytest

OK = re.compile(r"\[worker (\d+)\] collective_check: ok rank=(\d+) size=(\d+) checks=(\d+)")


def check_ok(output: str, workers: int) -> None:
    found = OK.findall(output)
    assert sorted(int(g[1]) for g in found) == list(range(workers)), found
    for label, rank, size, checks in found:
        assert label == rank and int(size) == workers, (label, rank, size)
        assert int(checks) > 200, checks
    assert len({g[3] for g in found}) == 1, f"ranks ran different checks: {found}"


@pytest.mark.parametrize("copy,mailbox,read_while_waiting",
                         [("1", "1", "1"), ("1", "0", "1"), ("0", "1", "1"), ("0", "1", "0")],
                         ids=["same-host-copy-and-mailbox", "same-host-copy", "tcp-only",
                              "tcp-only-transport-thread-reads"])
@pytest.mark.parametrize("workers", [2, 3, 4, 5])
def test_exact_results_without_a_scheduler_process(launch, tandem_bin_dir, workers, copy,
                                                   mailbox, read_while_waiting):
    """Every path between processes of one host: large pieces by reference
    (process_vm_readv) or as bytes over TCP, small ones and the references'
    messages through the shared-memory mailbox or over TCP, read by the
    waiting thread or by the transport's (docs/collectives.md)."""
    result = launch(workers, 0, [tandem_bin_dir / "collective_check"],
                    extra_args=["--no-scheduler"], timeout=120,
                    env={"TANDEM_COLLECTIVE_SAME_HOST_COPY": copy,
                         "TANDEM_COLLECTIVE_MAILBOX": mailbox,
                         "TANDEM_COLLECTIVE_READ_WHILE_WAITING": read_while_waiting,
                         "PS_VERBOSE": "1"})
    assert result.returncode == 0, result.job.describe()
    check_ok(result.output, workers)
    peers = workers - 1 if copy == "1" else 0
    mailboxes = peers if mailbox == "1" else 0
    formed = re.findall(r"collective mesh formed: .*same-host copy with (\d+) of (\d+) peers"
                        r".*, mailbox with (\d+)", result.output)
    assert formed == [(str(peers), str(workers - 1), str(mailboxes))] * workers, formed
    # Every worker picks the same rows of the selection table: the copy's
    # when all offered it (all on one host here), else TCP's.
    rows = re.findall(r"communicator of (\d+) worker\(s\) on one host: the selection table's "
                      r"(\S+) rows, 1024 KiB segments", result.output)
    expected_rows = "same-host-copy" if copy == "1" else "TCP"
    assert rows == [(str(workers), expected_rows)] * workers, rows
    # Worker 0 hosted the rendezvous; no scheduler process was started.
    assert "worker 0 hosts the rendezvous in-process" in result.output
    assert "[scheduler]" not in result.output
    assert "every node left; the job is complete" in result.output


def test_exact_results_with_a_scheduler_process(launch, tandem_bin_dir):
    result = launch(3, 0, [tandem_bin_dir / "collective_check"], timeout=120)
    assert result.returncode == 0, result.job.describe()
    check_ok(result.output, 3)
    assert "hosts the rendezvous" not in result.output


def test_no_scheduler_refuses_servers(launch, tandem_bin_dir):
    result = launch(2, 1, [tandem_bin_dir / "collective_check"],
                    extra_args=["--no-scheduler"], timeout=60)
    assert result.returncode == 2, result.output  # a usage error
    assert ("tandem: usage error: --no-scheduler starts only the workers, but -s asks for 1 "
            "server" in result.output), result.output


@pytest.mark.parametrize("workers,victim,no_scheduler,copy",
                         [(2, 1, True, "1"), (4, 2, True, "1"), (5, 4, False, "1"),
                          (3, 0, False, "1"), (4, 2, True, "0"), (3, 0, False, "0")])
def test_kill_9_raises_peer_lost_naming_the_rank(launch, tandem_bin_dir, workers, victim,
                                                 no_scheduler, copy):
    """With copy "0" every piece crosses TCP and the survivors wait reading
    their connections themselves (docs/transport.md)."""
    started = time.monotonic()
    result = launch(workers, 0, [tandem_bin_dir / "collective_check", "--die-rank", str(victim)],
                    extra_args=["--no-scheduler"] if no_scheduler else [],
                    env={"TANDEM_COLLECTIVE_TIMEOUT": "30",
                         "TANDEM_COLLECTIVE_SAME_HOST_COPY": copy}, timeout=90)
    elapsed = time.monotonic() - started
    assert result.returncode != 0, result.job.describe()
    assert elapsed < 30, f"took {elapsed:.1f} s\n{result.job.describe()}"
    out = result.output
    assert re.search(rf"\[worker {victim}\] collective_check: rank {victim} dies now", out), out
    for rank in range(workers):
        if rank == victim:
            continue
        # The mesh names "worker rank V (host:port)"; the scheduler's notice
        # "worker V (node N, ...)": either names the dead worker. A survivor may
        # still be in the last operation before the death.
        pattern = (rf"\[worker {rank}\] collective_check: PeerLost: .*'(after|before)-death'.*"
                   rf"lost worker (rank )?{victim} \(")
        assert re.search(pattern, out), f"worker {rank} did not name worker {victim}\n{out}"
    assert f"worker {victim} (pid" in out and "killed by signal 9" in out, out


@pytest.mark.parametrize("workers", [2, 3, 4, 5])
def test_framework_engine_over_tcp(launch, tandem_bin_dir, workers):
    """Named requests in another order on every rank come out exact; a shape
    that differs on the last rank fails on every rank, naming the tensor and
    what each rank sent; the next request succeeds (collective_check --engine)."""
    result = launch(workers, 0, [tandem_bin_dir / "collective_check", "--engine"],
                    extra_args=["--no-scheduler"],
                    env={"HOROVOD_CYCLE_TIME": "2", "HOROVOD_FUSION_THRESHOLD": "65536"},
                    timeout=120)
    assert result.returncode == 0, result.job.describe()
    found = re.findall(r"\[worker (\d+)\] collective_check: engine ok rank=(\d+) size=(\d+) "
                       r"mismatch=(.*) negotiated=(\d+) cached=(\d+) fused=(\d+) collectives=(\d+)",
                       result.output)
    assert sorted(int(g[1]) for g in found) == list(range(workers)), result.output
    last = workers - 1
    for label, rank, size, mismatch, negotiated, cached, fused, collectives in found:
        assert label == rank and int(size) == workers
        assert "tensor 'mismatched'" in mismatch, mismatch
        assert "rank 0 sent allreduce float32[10] sum" in mismatch, mismatch
        assert f"rank {last} sent allreduce float32[12] sum" in mismatch, mismatch
        # 3 steps x 24 tensors + the mismatched one + the one after it.
        assert int(negotiated) + int(cached) == 3 * 24 + 1, (negotiated, cached)
        assert int(cached) > 0 and int(fused) > 0, (cached, fused)
        assert int(collectives) < 3 * 24 + 1


@pytest.mark.parametrize("op", ["allreduce", "broadcast", "allgather", "reduce_scatter"])
def test_tandem_bench_prints_an_nccl_tests_table(tandem_bin_dir, op):
    """`tandem bench OP -n 3` runs collective_bench through the launcher and
    prints one row per size with no wrong element."""
    import subprocess
    if not (tandem_bin_dir / "collective_bench").exists():
        pytest.skip("benchmarks not built (TANDEM_BUILD_BENCH=OFF)")
    result = subprocess.run(
        [str(tandem_bin_dir / "tandem"), "bench", op, "-n", "3", "--min-bytes", "4096",
         "--max-bytes", "65536", "--factor", "4", "--iters", "2", "--warmup", "1"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"# tandem {op}, 3 ranks, float32" in result.stdout, result.stdout
    rows = re.findall(r"\[worker 0\]\s+(\d+)\s+(\d+)\s+float\s+\S+\s+[\d.]+\s+[\d.]+\s+[\d.]+"
                      r"\s+[\d.]+\s+(\d+)\s*$", result.stdout, re.M)
    assert [int(r[0]) for r in rows] == [4096, 16384, 65536], result.stdout
    assert all(r[2] == "0" for r in rows), rows
