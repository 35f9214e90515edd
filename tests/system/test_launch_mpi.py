"""`tandem launch --launcher mpi`: Open MPI's mpirun starts every process of
the job as `tandem mpi-exec`, which becomes the process of its MPI rank
(scheduler, servers, workers). A parameter-server job and a collectives-only
job give their exact results; a killed rank ends the job with the survivors
naming it and nothing left behind. docs/launch.md, "Through Open MPI"."""

from __future__ import annotations

import re
import shutil

import pytest

from test_kvstore_launch import SERVERS, WORKERS, check_sync_scenario, run

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None,
                                reason="Open MPI's mpirun is not installed (openmpi-bin)")


def test_parameter_server_job_gives_exact_sums(launch, tandem_bin_dir):
    output, seen = run(launch, tandem_bin_dir, "sync", launcher="mpi", timeout=120)
    check_sync_scenario(output, seen)
    assert f"{SERVERS} servers, {WORKERS} workers on this host" in output, output
    assert "[launcher] mpirun (pid" in output and "exited with status 0" in output, output


@pytest.mark.parametrize("workers", [2, 3])
def test_collectives_only_job_checks_every_operation(launch, tandem_bin_dir, workers):
    result = launch(workers, 0, [tandem_bin_dir / "collective_check"], launcher="mpi",
                    extra_args=["--no-scheduler"], timeout=120)
    assert result.returncode == 0, result.job.describe()
    for rank in range(workers):
        assert re.search(rf"\[worker {rank}\] collective_check: ok rank={rank} size={workers} ",
                         result.output), result.output


def test_a_killed_rank_fails_the_job_and_the_others_name_it(launch, tandem_bin_dir):
    result = launch(3, 0, [tandem_bin_dir / "collective_check", "--die-rank", "1"],
                    launcher="mpi", extra_args=["--no-scheduler"],
                    env={"TANDEM_COLLECTIVE_TIMEOUT": "30"}, timeout=120)
    assert result.returncode != 0, result.job.describe()
    out = result.output
    assert "[worker 1] collective_check: rank 1 dies now" in out, out
    # mpirun stops the other ranks as soon as one fails: a survivor either
    # noticed the loss first and named it, or was stopped by mpirun.
    named = [rank for rank in (0, 2) if re.search(
        rf"\[worker {rank}\] collective_check: PeerLost: .*lost worker (rank )?1 ", out)]
    assert named or re.search(r"mpirun (noticed|detected)", out), out


def test_a_missing_mpirun_is_reported_before_anything_starts(launch, tandem_bin_dir):
    result = launch(2, 1, ["/bin/true"], launcher="mpi",
                    launcher_env={"TANDEM_MPIRUN": "/nonexistent/mpirun"}, timeout=30)
    assert result.returncode != 0
    assert "/nonexistent/mpirun" in result.output, result.output


def test_timeline_of_every_rank_is_merged(launch, tandem_bin_dir, tmp_path):
    """TANDEM_TIMELINE under mpirun: each rank's rank-exec names its file
    for the rank, and the launcher merges them into one trace."""
    from test_metrics_launch import check_collectives_trace
    trace = tmp_path / "trace.json"
    result = launch(3, 0, [tandem_bin_dir / "collective_check", "--steady", "5"], launcher="mpi",
                    extra_args=["--no-scheduler"], env={"TANDEM_TIMELINE": str(trace)},
                    timeout=120)
    assert result.returncode == 0, result.job.describe()
    assert f"[launcher] timeline: merged 3 of 3 processes" in result.output, result.output
    assert f"into {trace}" in result.output, result.output
    check_collectives_trace(trace, 3, 5)
    assert not list(tmp_path.glob("trace.json.*")), "per-process files left behind"
