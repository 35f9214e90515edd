"""One node, both strategies (docs/cluster.md, "One node, both strategies"):
through `tandem launch -n 4 -s 2`, every worker joins the job once and uses
the parameter server and the collectives in the same process, interleaved
(an allreduce in flight during a dist_sync push-pull, then a broadcast),
with exact results, from C++ (tests/programs/hybrid_rounds.cc: Cluster::Join,
KVStore::Create(type, cluster), Collectives::Open(cluster)) and from Python
(tests/system/python_workers/hybrid_worker.py: tandem.init() and
tandem.kvstore.create() in either order). The store's, the collectives' and
the cluster's ranks agree.

A worker killed with SIGKILL during it is reported once by every other
process, naming the node, and every other process exits 200.

Skipped with a reason when the Python package was not built (the Python
cases)."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from python_job import check_ok, python_env, worker

WORKERS, SERVERS, ROUNDS = 4, 2, 20


def command(tandem_bin_dir, kind: str, rounds: int, pause_ms: int = 0) -> list[str]:
    if kind == "cxx":
        return [str(tandem_bin_dir / "hybrid_rounds"), "--rounds", str(rounds),
                "--pause-ms", str(pause_ms)]
    return worker("hybrid_worker.py") + ["--first", kind, "--rounds", str(rounds),
                                         "--pause-ms", str(pause_ms)]


def environment(tandem_bin_dir, kind: str) -> dict[str, str]:
    return {} if kind == "cxx" else python_env(tandem_bin_dir)


@pytest.mark.parametrize("kind", ["cxx", "init", "store"])
def test_every_worker_uses_the_parameter_server_and_the_collectives_together(
        launch, tandem_bin_dir, kind):
    result = launch(WORKERS, SERVERS, command(tandem_bin_dir, kind, ROUNDS),
                    launcher_env=environment(tandem_bin_dir, kind), timeout=180)
    assert result.returncode == 0, result.job.describe()
    assert check_ok(result.output, "hybrid", WORKERS, kind) == 3 * ROUNDS
    for rank in range(WORKERS):
        assert f"[worker {rank}] hybrid: rank={rank} round={ROUNDS} ok" in result.output


def loss_lines(output: str, label: str, victim: int) -> list[str]:
    """The log lines (not the program's own error line) of `label` that
    report worker `victim` lost."""
    return [line for line in output.splitlines()
            if line.startswith(f"[{label}] [") and re.search(rf"\blost worker {victim}\b", line)]


@pytest.mark.parametrize("kind", ["cxx", "init"])
def test_a_killed_worker_is_reported_once_by_every_process(launch, tandem_bin_dir, kind):
    victim = 3
    job = launch.start(WORKERS, SERVERS, command(tandem_bin_dir, kind, 100000, pause_ms=20),
                       launcher_env=environment(tandem_bin_dir, kind))
    job.wait_for_line(rf"\[worker {victim}\] hybrid: rank={victim} round=5 ok", timeout=120)
    victims = [p for p in job.role_processes("worker")
               if p.env.get("DMLC_WORKER_ID") == str(victim)]
    assert len(victims) == 1, victims
    os.kill(victims[0].pid, signal.SIGKILL)
    killed_at = time.monotonic()
    job.wait(timeout=60)
    job.assert_no_leftovers()
    output = job.output
    assert re.search(rf"\[launcher\] job failed: worker {victim} \(pid {victims[0].pid}\) killed "
                     rf"by signal 9", output), job.describe()
    survivors = ["scheduler"] + [f"server {s}" for s in range(SERVERS)] + \
        [f"worker {w}" for w in range(WORKERS) if w != victim]
    for label in survivors:
        m = re.search(rf"\[launcher\] {label} \(pid \d+\) exited with status (\d+)", output)
        assert m and m.group(1) == "200", f"{label}:\n{job.describe()}"
        lines = loss_lines(output, label, victim)
        # One node per process: the loss is logged once, not once per service.
        assert len(lines) == 1, f"{label} reported the loss {len(lines)} times:\n" + \
            "\n".join(lines) + "\n" + job.describe()
        assert re.search(rf"worker {victim} \(node \d+, ", lines[0]), lines[0]
    assert job.finished - killed_at < 30, job.describe()
