"""The PMIx start-up contract (docs/contracts.md, "PMIx"): Open MPI's real
`mpirun` and Slurm's `srun --mpi=pmix` start a collectives-only job
(tests/programs/collective_check) and a parameter-server job
(tests/programs/kvstore_check, servers taken from the last ranks) with NO
coordinator variable at all: rank 0 publishes its rendezvous address through
the launcher's PMIx server, every result is exact, and every process logs
the pmix contract. Also: an explicit TANDEM_COORDINATOR beats the exchange,
a rank that never reaches the fence times the others out naming the fence,
and a PMIx server that is gone hands over to the OMPI_* contract."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from conftest import free_port
from test_contracts_start import (check_collectives, check_kvstore, clean_env, mpirun,
                                  run_processes, split_tagged)
from test_launch_slurm import slurm_env  # noqa: F401 (the one-node Slurm fixture)

PMIX_NOTE = "(rank 0's, through PMIx key tandem.coordinator)"

needs_slurm = pytest.mark.skipif(
    shutil.which("srun") is None or os.geteuid() != 0,
    reason="needs Slurm (slurm-wlm, munge) and root (the test's slurmd runs tasks as root)")


def mpirun_argv(np: int, extra: dict[str, str] | None = None) -> list[str]:
    """mpirun on loopback, with no coordinator variable among -x."""
    path = shutil.which("mpirun")
    if path is None:
        pytest.skip("mpirun not installed (openmpi-bin)")
    argv = [path, "--allow-run-as-root", "--oversubscribe", "-np", str(np), "--bind-to", "none",
            "--mca", "oob_tcp_if_include", "lo", "--mca", "btl_tcp_if_include", "lo",
            "--tag-output"]
    for k, v in (extra or {}).items():
        argv += ["-x", f"{k}={v}"]
    return argv


def assert_pmix_started(outputs: list[str], world: int, note: str = PMIX_NOTE):
    """Every rank logs the pmix contract with its rank; rank 0's line names
    where the rendezvous address came from."""
    for rank, output in enumerate(outputs):
        assert re.search(rf"start-up contract: pmix: rank {rank} of {world} \(local \d+ of \d+, "
                         r"node 0 of 1\)", output), output
    assert note in outputs[0], outputs[0]


# -- Open MPI's mpirun ---------------------------------------------------------------


@pytest.mark.parametrize("world", [2, 4])
def test_collectives_job_under_mpirun_without_a_coordinator(tandem_bin_dir, world):
    proc = mpirun(mpirun_argv(world) + [str(tandem_bin_dir / "collective_check")])
    assert proc.returncode == 0, proc.stdout
    outputs = split_tagged(proc.stdout, world)
    check_collectives(outputs, world, "pmix")
    assert_pmix_started(outputs, world)
    assert "[also present, ignored: ompi]" in outputs[1], outputs[1]


@pytest.mark.parametrize("world,servers", [(4, 2), (5, 2)])
def test_parameter_server_job_under_mpirun_without_a_coordinator(tandem_bin_dir, world,
                                                                 servers):
    argv = mpirun_argv(world, {"TANDEM_NUM_SERVERS": str(servers)})
    argv += [str(tandem_bin_dir / "kvstore_check"), "--scenario", "sync"]
    proc = mpirun(argv)
    assert proc.returncode == 0, proc.stdout
    outputs = split_tagged(proc.stdout, world)
    check_kvstore(outputs, world - servers, servers, "pmix")
    assert_pmix_started(outputs, world)
    # The servers are the last ranks.
    assert f"-> server 0 of {world - servers} workers and {servers} servers" in \
        outputs[world - servers], outputs[world - servers]


def test_an_explicit_coordinator_beats_the_exchange(tandem_bin_dir):
    port = free_port()
    argv = mpirun_argv(3, {"TANDEM_COORDINATOR": f"127.0.0.1:{port}"})
    proc = mpirun(argv + [str(tandem_bin_dir / "collective_check")])
    assert proc.returncode == 0, proc.stdout
    outputs = split_tagged(proc.stdout, 3)
    check_collectives(outputs, 3, "pmix")
    assert_pmix_started(outputs, 3, f"rendezvous at 127.0.0.1:{port} (TANDEM_COORDINATOR)")
    assert PMIX_NOTE not in proc.stdout, proc.stdout


def test_a_rank_that_never_reaches_the_fence_times_the_others_out(tandem_bin_dir):
    # MPMD: rank 0 is a tandem program, rank 1 never starts tandem.
    argv = mpirun_argv(1, {"TANDEM_START_TIMEOUT": "3"})
    argv += [str(tandem_bin_dir / "collective_check"), ":", "-np", "1", "sleep", "60"]
    proc = mpirun(argv, timeout=60)
    assert proc.returncode != 0, proc.stdout
    rank0 = split_tagged(proc.stdout, 2)[0]
    assert "rank 0 waited 3000 ms (TANDEM_START_TIMEOUT) at the PMIx fence of namespace" in \
        rank0, proc.stdout
    assert "for every rank of the job to reach tandem's start-up" in rank0, rank0


# -- a PMIx server that is gone --------------------------------------------------------


def stale_pmix_env(rank: int) -> dict[str, str]:
    """The PMIX_* variables of a process whose mpirun has ended: nobody
    listens at the server's address any more."""
    return {"PMIX_RANK": str(rank), "PMIX_NAMESPACE": "4242",
            "PMIX_SERVER_URI41": f"4241.0;tcp4://127.0.0.1:{free_port()}",
            "PMIX_VERSION": "4.2.2"}


def test_a_gone_pmix_server_hands_over_to_the_ompi_contract(tandem_bin_dir, tmp_path):
    port = free_port()
    envs = [{**stale_pmix_env(r), "OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": "2",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)} for r in range(2)]
    results = run_processes([tandem_bin_dir / "collective_check"], envs, tmp_path, 60)
    for code, output in results:
        assert code == 0, output
    outputs = [o for _, o in results]
    check_collectives(outputs, 2, "ompi")
    for output in outputs:
        assert "[also present, ignored: pmix (PMIx_Init failed: " in output, output


def test_a_gone_pmix_server_and_nothing_else_is_refused(tandem_bin_dir, tmp_path):
    [(code, output)] = run_processes([tandem_bin_dir / "collective_check"],
                                     [stale_pmix_env(1)], tmp_path, 30)
    assert code != 0, output
    assert "PMIX_RANK=1 and PMIX_NAMESPACE=4242 mark a rank of a PMIx job, but PMIx_Init " \
           "failed" in output, output


# -- Slurm's srun --mpi=pmix -------------------------------------------------------------


def srun(slurm: dict[str, str], argv: list[str], np: int, extra: dict[str, str] | None = None,
         timeout: float = 120) -> list[str]:
    """srun --mpi=pmix -n np --label argv; returns each task's lines."""
    env = {**clean_env(), **slurm, **(extra or {})}
    proc = subprocess.run(["srun", "--mpi=pmix", "-n", str(np), "--label", "--kill-on-bad-exit=1"]
                          + [str(a) for a in argv], env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    per = [[] for _ in range(np)]
    for line in (proc.stdout + proc.stderr).splitlines():
        m = re.match(r"^\s*(\d+): ?(.*)$", line)
        if m and int(m.group(1)) < np:
            per[int(m.group(1))].append(m.group(2))
    return ["\n".join(lines) for lines in per]


@needs_slurm
def test_collectives_job_under_srun_mpi_pmix(tandem_bin_dir, slurm_env):  # noqa: F811
    outputs = srun(slurm_env, [tandem_bin_dir / "collective_check"], 4)
    check_collectives(outputs, 4, "pmix")
    assert_pmix_started(outputs, 4)
    assert "[also present, ignored: slurm]" in outputs[2], outputs[2]


@needs_slurm
def test_parameter_server_job_under_srun_mpi_pmix(tandem_bin_dir, slurm_env):  # noqa: F811
    outputs = srun(slurm_env, [tandem_bin_dir / "kvstore_check", "--scenario", "sync"], 4,
                   {"TANDEM_NUM_SERVERS": "2"})
    check_kvstore(outputs, 2, 2, "pmix")
    assert_pmix_started(outputs, 4)
