"""`tandem launch --launcher slurm` under a real one-machine Slurm: the test
starts munged, slurmctld and slurmd (Debian's slurm-wlm and munge) with a
configuration of its own in a temporary directory (tests/system/
slurm_cluster.py). srun starts
every task as `tandem rank-exec`, which becomes the scheduler, a server or a
worker by SLURM_PROCID; the parameter-server and collectives jobs give
their exact results, and a dead task ends the job with nothing left behind.
docs/launch.md, "Through Slurm"."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from slurm_cluster import requires_slurm, slurm_env  # noqa: F401 - a fixture
from test_kvstore_launch import SERVERS, WORKERS, check_sync_scenario, run

pytestmark = requires_slurm


def test_parameter_server_job_gives_exact_sums(launch, tandem_bin_dir, slurm_env):
    output, seen = run(launch, tandem_bin_dir, "sync", launcher="slurm", timeout=180,
                       launcher_env=slurm_env)
    check_sync_scenario(output, seen)
    assert f"{1 + SERVERS + WORKERS} tasks through srun" in output, output


@pytest.mark.parametrize("workers", [2, 3])
def test_collectives_only_job_checks_every_operation(launch, tandem_bin_dir, slurm_env, workers):
    result = launch(workers, 0, [tandem_bin_dir / "collective_check"], launcher="slurm",
                    extra_args=["--no-scheduler"], launcher_env=slurm_env, timeout=180)
    assert result.returncode == 0, result.job.describe()
    for rank in range(workers):
        assert re.search(rf"\[worker {rank}\] collective_check: ok rank={rank} size={workers} ",
                         result.output), result.output


def test_a_dead_task_fails_the_job_and_the_others_name_it(launch, tandem_bin_dir, slurm_env):
    result = launch(3, 0, [tandem_bin_dir / "collective_check", "--die-rank", "2"],
                    launcher="slurm", extra_args=["--no-scheduler"], launcher_env=slurm_env,
                    env={"TANDEM_COLLECTIVE_TIMEOUT": "30"}, timeout=180)
    assert result.returncode != 0, result.job.describe()
    out = result.output
    assert "[worker 2] collective_check: rank 2 dies now" in out, out
    for rank in (0, 1):
        assert re.search(rf"\[worker {rank}\] collective_check: PeerLost: .*lost worker (rank )?2 ",
                         out), f"worker {rank} did not name worker 2\n{out}"


def test_max_restarts_runs_srun_again_and_the_job_succeeds(launch, tandem_bin_dir, slurm_env):
    from test_launch_restart import FAST, LABELS, starts
    result = launch(2, 1, [tandem_bin_dir / "restart_check", "--fail-rank", "1",
                           "--fail-until", "1"],
                    launcher="slurm", launcher_env=slurm_env, env=FAST, timeout=180,
                    extra_args=["--command-runs-all-roles", "--teardown-grace", "2",
                                "--max-restarts", "1", "--restart-delay", "0.2"])
    out = result.output
    assert result.returncode == 0, result.job.describe()
    # The cause is the rank that rank-exec reported, with its status, not srun's exit.
    assert re.search(r"\[launcher\] restarting the job \(restart 1 of 1\) after worker 1 on \S+ "
                     r"\(pid \d+\) killed by signal 9 \(SIGKILL\);", out), out
    assert "[launcher] job succeeded after 1 restart" in out, out
    first, second = starts(out, 0), starts(out, 1)
    assert set(first) == LABELS and set(second) == LABELS, out
    # srun --export=ALL carried the attempt to every task.
    assert {p["max"] for p in (*first.values(), *second.values())} == {"1"}, out


def _srun_tasks(slurm_env, argv, tasks: int, extra_env=None, timeout=180) -> list[str]:
    """Runs `srun --label` itself (no tandem launch): each task finds its
    role from Slurm's variables alone. Returns each task's output lines."""
    # The job's secret, as a user exports it before srun (docs/security.md).
    env = dict(os.environ, TANDEM_SECRET="5e" * 32, **slurm_env, **(extra_env or {}))
    proc = subprocess.run(["srun", f"--ntasks={tasks}", "--overcommit", "--label",
                           "--kill-on-bad-exit=0", "--wait=20"] + [str(a) for a in argv],
                          env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    per = [[] for _ in range(tasks)]
    for line in (proc.stdout + proc.stderr).splitlines():
        m = re.match(r"^\s*(\d+): ?(.*)$", line)
        if m:
            per[int(m.group(1))].append(m.group(2))
    return ["\n".join(lines) for lines in per]


def test_programs_started_by_plain_srun_find_their_job(tandem_bin_dir, slurm_env):
    """Zero configuration: `srun -n 4 collective_check` and `srun -n 5
    kvstore_check` (last 2 tasks servers) read only SLURM_* and give exact
    results; the log names the contract (docs/contracts.md)."""
    from test_contracts_start import check_collectives, check_kvstore
    outputs = _srun_tasks(slurm_env, [tandem_bin_dir / "collective_check"], 4)
    check_collectives(outputs, 4, "slurm")
    outputs = _srun_tasks(slurm_env, [tandem_bin_dir / "kvstore_check", "--scenario", "sync"], 5,
                          extra_env={"TANDEM_NUM_SERVERS": "2"})
    check_kvstore(outputs, 3, 2, "slurm")


def test_timeline_of_every_task_is_merged(launch, tandem_bin_dir, slurm_env, tmp_path):
    """TANDEM_TIMELINE under srun: each task's rank-exec names its file for
    the task, and the launcher merges them into one trace."""
    from test_metrics_launch import check_collectives_trace
    trace = tmp_path / "trace.json"
    result = launch(3, 0, [tandem_bin_dir / "collective_check", "--steady", "5"],
                    launcher="slurm", extra_args=["--no-scheduler"], launcher_env=slurm_env,
                    env={"TANDEM_TIMELINE": str(trace)}, timeout=180)
    assert result.returncode == 0, result.job.describe()
    assert f"[launcher] timeline: merged 3 of 3 processes" in result.output, result.output
    assert f"into {trace}" in result.output, result.output
    check_collectives_trace(trace, 3, 5)
    assert not list(tmp_path.glob("trace.json.*")), "per-process files left behind"
